"""A live set rendered: one compose service per container on its own GPUs behind the one
gateway (GATEWAY_LIVE_UPSTREAMS), and on Kubernetes one Deployment and Service per variant."""

from __future__ import annotations

import json
from pathlib import Path

import yaml

from composer.render.outputs import rendered_files
from composer.stack.load import load_stack
from composer.stack.model import Stack

from .conftest import REPO
from .test_kubernetes import validate

LIVE = """
[gateway]
live = ["baseline", "mtp"]
[variants.baseline]
gpus = ["0,1", "2,3"]
[variants.mtp]
gpus = "4,5,6,7"
"""


def _stack(tmp_path: Path, environ: dict[str, str] | None = None) -> Stack:
    extra = tmp_path / "live.toml"
    extra.write_text(LIVE, encoding="utf-8")
    return load_stack([REPO / "composer.toml", extra], None, environ=environ or {})


def _live_file(stack: Stack, out: Path) -> dict:
    (live,) = [f for f in rendered_files(stack, "compose", [], out) if f.path.name == "live.yml"]
    return yaml.safe_load(live.content)


def test_one_service_per_live_container_on_its_own_gpus(tmp_path: Path) -> None:
    doc = _live_file(_stack(tmp_path), tmp_path / "out")
    services = doc["services"]
    assert sorted(services) == [
        "follow",
        "gateway",
        "gateway-port",
        "prometheus",
        "vllm-baseline-1",
        "vllm-baseline-2",
        "vllm-mtp-1",
    ]  # the optional services under their profiles, as in a variant's file
    devices = {
        name: services[name]["deploy"]["resources"]["reservations"]["devices"][0]["device_ids"]
        for name in services
        if name.startswith("vllm-")
    }
    assert devices == {"vllm-baseline-1": ["0,1"], "vllm-baseline-2": ["2,3"], "vllm-mtp-1": ["4,5,6,7"]}
    labels = services["vllm-baseline-2"]["labels"]
    assert labels["vllm-composer.live"] == "baseline/2" and labels["vllm-composer.gpus"] == "2,3"
    assert "--speculative-config" in services["vllm-mtp-1"]["command"]
    assert "--speculative-config" not in services["vllm-baseline-1"]["command"]
    upstreams = json.loads(services["gateway"]["environment"]["GATEWAY_LIVE_UPSTREAMS"])
    assert upstreams == [
        {"name": "baseline/1", "variant": "baseline", "url": "http://vllm-baseline-1:8000"},
        {"name": "baseline/2", "variant": "baseline", "url": "http://vllm-baseline-2:8000"},
        {"name": "mtp/1", "variant": "mtp", "url": "http://vllm-mtp-1:8000"},
    ]
    assert "ports" not in services["vllm-mtp-1"]  # only the gateway publishes the port


def test_a_live_set_gateway_gets_the_classes_and_aliases_without_switching(tmp_path: Path) -> None:
    extra = tmp_path / "routes.toml"
    extra.write_text(
        '[variants.mtp]\naliases = ["fast"]\n[workloads]\nchat-1 = "mtp"\nlong-16 = "baseline"\n',
        encoding="utf-8",
    )
    (tmp_path / "live.toml").write_text(LIVE, encoding="utf-8")
    stack = load_stack([REPO / "composer.toml", tmp_path / "live.toml", extra], None, environ={})
    env = _live_file(stack, tmp_path / "out")["services"]["gateway"]["environment"]
    assert env["GATEWAY_ALIASES"] == "fast=mtp"
    assert env["GATEWAY_WORKLOADS"] == "chat-1:0:512:0:1=mtp,long-16:4097:0:0:16=baseline"
    assert "GATEWAY_POLICY" not in env and "GATEWAY_SWITCH_ON_MODEL" not in env  # switching stays off


def test_without_gpus_no_device_is_reserved_but_the_sets_stay_labels(tmp_path: Path) -> None:
    services = _live_file(_stack(tmp_path, {"GPU_DEVICES": "none"}), tmp_path / "out")["services"]
    assert all("deploy" not in s for s in services.values())
    assert services["vllm-mtp-1"]["labels"]["vllm-composer.gpus"] == "4,5,6,7"


def test_no_live_set_renders_no_live_file(default_stack: Stack, tmp_path: Path) -> None:
    assert all(f.path.name != "live.yml" for f in rendered_files(default_stack, "compose", [], tmp_path))


def test_kubernetes_renders_a_deployment_and_service_per_live_variant(tmp_path: Path) -> None:
    files = [
        f
        for f in rendered_files(_stack(tmp_path), "kubernetes", [], tmp_path / "k")
        if f.path.parent.name == "live"
    ]
    docs = {f.path.name: yaml.safe_load(f.content) for f in files}
    kustomization = docs.pop("kustomization.yaml")
    assert sorted(kustomization["resources"]) == sorted(docs)
    baseline, mtp = docs["deployment-baseline.yaml"], docs["deployment-mtp.yaml"]
    assert baseline["spec"]["replicas"] == 2 and mtp["spec"]["replicas"] == 1
    limits = [d["spec"]["template"]["spec"]["containers"][0]["resources"]["limits"] for d in (baseline, mtp)]
    assert [lim["nvidia.com/gpu"] for lim in limits] == [2, 4]
    assert mtp["spec"]["selector"]["matchLabels"]["vllm-composer.variant"] == "mtp"
    assert docs["service-mtp.yaml"]["spec"]["selector"] == mtp["spec"]["selector"]["matchLabels"]
    gateway = docs["gateway-deployment.yaml"]["spec"]["template"]["spec"]["containers"][0]
    env = {e["name"]: e.get("value") for e in gateway["env"]}
    assert json.loads(env["GATEWAY_LIVE_UPSTREAMS"]) == [
        {"name": "baseline/1", "variant": "baseline", "url": "http://vllm-baseline:8000"},
        {"name": "mtp/1", "variant": "mtp", "url": "http://vllm-mtp:8000"},
    ]
    out = tmp_path / "docs"
    out.mkdir()
    paths = []
    for name, doc in docs.items():
        (out / name).write_text(yaml.safe_dump(doc))
        paths.append(out / name)
    done = validate(paths)
    assert done.returncode == 0, done.stdout + done.stderr
