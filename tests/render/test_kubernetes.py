"""Kubernetes manifests: the committed tree is the golden, every resource passes the official
schemas strictly, and each Deployment runs exactly the argv of the variant's compose file."""

from __future__ import annotations

import copy
import shutil
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from composer import labels
from composer.cli import main
from composer.errors import RenderError
from composer.render.files import is_current
from composer.render.kubernetes import render_kubernetes
from composer.stack.load import load_stack
from composer.stack.model import Stack
from tests.conftest import shipped_variants

from .conftest import REPO
from .helpers import interpolate
from .odd import odd_stack

KUBERNETES_VERSION = "1.37.0"
VARIANTS = shipped_variants()
KUBE_VARS = ("KUBE_NAMESPACE", "KUBE_SERVICE_URL", "KUBECTL")


@pytest.fixture(autouse=True)
def no_kube_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in KUBE_VARS:
        monkeypatch.delenv(name, raising=False)


def _docs(files: list) -> dict[str, dict]:
    """Rendered files parsed, by path relative to the output folder's parent."""
    return {str(f.path): yaml.safe_load(f.content) for f in files}


def _resources(files: list) -> list[dict]:
    return [doc for doc in _docs(files).values() if doc["kind"] != "Kustomization"]


def _deployment(files: list, variant: str) -> dict:
    return next(
        doc for path, doc in _docs(files).items() if path.endswith(f"overlays/{variant}/deployment.yaml")
    )


def _container(deployment: dict) -> dict:
    return deployment["spec"]["template"]["spec"]["containers"][0]


def test_defaults_reproduce_the_committed_tree(default_stack: Stack) -> None:
    files = render_kubernetes(default_stack, [], REPO / "kubernetes")
    expected = {
        "base/kustomization.yaml",
        "base/service.yaml",
        "base/gateway-deployment.yaml",
        "base/variant-service.yaml",
        "base/pdb-gateway.yaml",
    } | {f"overlays/{v}/{name}" for v in VARIANTS for name in ("kustomization.yaml", "deployment.yaml")}
    assert {str(f.path.relative_to(REPO / "kubernetes")) for f in files} == expected
    on_disk = {
        str(p.relative_to(REPO / "kubernetes")) for p in (REPO / "kubernetes").rglob("*") if p.is_file()
    }
    assert on_disk == expected, "kubernetes/ holds files that render does not produce"
    for file in files:
        assert is_current(file), f"{file.path} differs from a default render"


def _stacks(default_stack: Stack) -> dict[str, Stack]:
    pvc = replace(default_stack, kubernetes=replace(default_stack.kubernetes, models="pvc", namespace="llm"))
    return {
        "default": default_stack,
        "pvc-no-gpu": replace(pvc, gpus=None),
        "odd": replace(
            odd_stack(default_stack), service="vllm", images={"vllm": "r.local:5000/v:1", "dflash2": "d:2"}
        ),
    }


def validate(paths: list[Path]) -> subprocess.CompletedProcess[str]:
    """`kubernetes-validate --strict` on files, in its own interpreter (the tests folder holds a
    `packaging` package that would shadow the library it imports)."""
    return subprocess.run(
        [sys.executable, "-m", "kubernetes_validate", "--strict", "-k", KUBERNETES_VERSION, *map(str, paths)],
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )


def _write_resources(docs: list[dict], directory: Path) -> list[Path]:
    paths = []
    for index, doc in enumerate(docs):
        path = directory / f"{index}-{doc['kind'].lower()}.yaml"
        path.write_text(yaml.safe_dump(doc))
        paths.append(path)
    return paths


def test_every_resource_passes_strict_schema_validation(default_stack: Stack, tmp_path: Path) -> None:
    """The committed tree and three unusual stacks: PVCs without GPUs, and awkward text."""
    paths = [p for p in sorted((REPO / "kubernetes").rglob("*.yaml")) if p.name != "kustomization.yaml"]
    for which, stack in _stacks(default_stack).items():
        if which == "default":
            continue
        resources = _resources(render_kubernetes(stack, [], tmp_path / which))
        # each variant's and the gateway's Deployment; the shared and the internal Services; its PDB
        kinds = ["Deployment"] * (len(VARIANTS) + 1) + ["PodDisruptionBudget"] + ["Service"] * 2
        assert sorted(doc["kind"] for doc in resources) == kinds
        (tmp_path / which).mkdir()
        paths += _write_resources(resources, tmp_path / which)
    done = validate(paths)
    assert done.returncode == 0, done.stdout + done.stderr
    per_stack = len(VARIANTS) + 4
    assert done.stdout.count(" passed ") == len(paths) == 3 * per_stack, done.stdout  # 3 stacks
    assert f"against version {KUBERNETES_VERSION.rsplit('.', 1)[0]}" in done.stdout


def test_strict_validation_would_catch_a_misplaced_key(default_stack: Stack, tmp_path: Path) -> None:
    deployment = copy.deepcopy(_deployment(render_kubernetes(default_stack, ["mtp"], tmp_path), "mtp"))
    _container(deployment)["gpus"] = 4  # not a container field
    wrong_type = copy.deepcopy(deployment)
    del _container(wrong_type)["gpus"]
    wrong_type["spec"]["replicas"] = "one"
    done = validate(_write_resources([deployment, wrong_type], tmp_path))
    assert done.returncode != 0
    assert done.stdout.count(" did not validate ") == 2, done.stdout + done.stderr
    assert "'gpus' was unexpected" in done.stdout and "spec.replicas: 'one'" in done.stdout


@pytest.mark.parametrize("variant", VARIANTS)
def test_deployment_args_equal_the_compose_command(variant: str) -> None:
    compose = yaml.safe_load((REPO / "compose" / f"{variant}.yml").read_text())
    command = [interpolate(arg, {}) for arg in compose["services"]["vllm"]["command"]]
    deployment = yaml.safe_load((REPO / "kubernetes" / "overlays" / variant / "deployment.yaml").read_text())
    assert _container(deployment)["args"] == command
    assert "command" not in _container(deployment)  # the image's entrypoint stays, as in compose


def test_odd_values_keep_the_same_argv_and_env(default_stack: Stack, tmp_path: Path) -> None:
    from composer.render.files import render_all

    stack = _stacks(default_stack)["odd"]
    compose = yaml.safe_load(
        next(f for f in render_all(stack, ["dflash2"], tmp_path) if f.path.suffix == ".yml").content
    )
    service = compose["services"][stack.service]
    container = _container(_deployment(render_kubernetes(stack, ["dflash2"], tmp_path), "dflash2"))
    assert container["args"] == [interpolate(a, {}) for a in service["command"]]
    plain = {e["name"]: e["value"] for e in container["env"] if "value" in e}
    expected = {k: interpolate(v, {}) for k, v in service["environment"].items() if k != "VLLM_API_KEY"}
    assert plain == expected


def test_no_key_literal_and_the_key_comes_from_a_secret(empty_env_file: Path, tmp_path: Path) -> None:
    key = "sk-never-in-a-file-0123456789abcdef"
    stack = load_stack(None, empty_env_file, environ={"VLLM_API_KEY": key})
    files = render_kubernetes(stack, [], tmp_path)
    for file in files:
        assert key not in file.content
        assert "kind: Secret" not in file.content
    for variant in VARIANTS:
        env = _container(_deployment(files, variant))["env"]
        ref = next(e for e in env if e["name"] == "VLLM_API_KEY")
        assert ref == {
            "name": "VLLM_API_KEY",
            "valueFrom": {"secretKeyRef": {"name": "vllm-api-key", "key": "VLLM_API_KEY"}},
        }


def test_no_latest_tag_and_latest_is_refused(default_stack: Stack, tmp_path: Path) -> None:
    for doc in _resources(render_kubernetes(default_stack, [], tmp_path)):
        for container in doc.get("spec", {}).get("template", {}).get("spec", {}).get("containers", []):
            name = container["image"].rsplit("/", 1)[-1]
            assert ":" in name and not name.endswith(":latest"), container["image"]
    for image in ("vllm-sim:latest", "registry.local:5000/vllm"):
        with pytest.raises(RenderError, match="fixed tag"):
            render_kubernetes(
                replace(default_stack, images={**default_stack.images, "vllm": image}), ["mtp"], tmp_path
            )
    digest = "vllm@sha256:" + "a" * 64
    render_kubernetes(
        replace(default_stack, images={**default_stack.images, "vllm": digest}), ["mtp"], tmp_path
    )


def test_deployment_shape(default_stack: Stack, tmp_path: Path) -> None:
    files = render_kubernetes(default_stack, [], tmp_path)
    for variant in VARIANTS:
        deployment = _deployment(files, variant)
        spec, pod = deployment["spec"], deployment["spec"]["template"]
        container = _container(deployment)
        assert spec["strategy"] == {"type": "Recreate"} and spec["replicas"] == 1
        assert deployment["metadata"]["name"] == "vllm"  # one Deployment for every variant
        assert container["resources"]["limits"]["nvidia.com/gpu"] == default_stack.tensor_parallel_size
        assert pod["metadata"]["labels"][labels.VARIANT] == variant
        assert pod["spec"]["terminationGracePeriodSeconds"] == default_stack.stop_grace_period
        startup = container["startupProbe"]
        assert startup["httpGet"]["path"] == "/health"
        assert startup["periodSeconds"] * startup["failureThreshold"] >= default_stack.start_period
        assert container["readinessProbe"]["httpGet"]["path"] == "/health"
        assert "livenessProbe" not in container  # off by default: it would restart a slow loader
        volumes = {v["name"]: v for v in pod["spec"]["volumes"]}
        assert volumes["dshm"]["emptyDir"] == {"medium": "Memory", "sizeLimit": "8Gi"}
        assert volumes["models"]["hostPath"] == {"path": default_stack.model_dir, "type": "Directory"}
        mounts = {m["name"]: m for m in container["volumeMounts"]}
        assert mounts["models"]["readOnly"] is True and mounts["dshm"]["mountPath"] == "/dev/shm"
        selector = spec["selector"]["matchLabels"]
        assert selector.items() <= pod["metadata"]["labels"].items()
        assert labels.VARIANT not in selector  # selectors are immutable: the same for every variant
    assert "draft" in {
        v["name"] for v in _deployment(files, "dflash2")["spec"]["template"]["spec"]["volumes"]
    }


def test_config_hash_label_is_the_spec_hash(default_stack: Stack, tmp_path: Path) -> None:
    from composer.render.target import resolve_target

    files = render_kubernetes(default_stack, [], tmp_path)
    for variant in VARIANTS:
        pod = _deployment(files, variant)["spec"]["template"]
        assert pod["metadata"]["labels"][labels.CONFIG_HASH] == resolve_target(default_stack, variant).hash


def test_pvc_models_and_no_gpus(default_stack: Stack, tmp_path: Path) -> None:
    files = render_kubernetes(_stacks(default_stack)["pvc-no-gpu"], [], tmp_path)
    pod = _deployment(files, "dflash2")["spec"]["template"]["spec"]
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert volumes["models"]["persistentVolumeClaim"] == {"claimName": "vllm-models", "readOnly": True}
    assert volumes["draft"]["persistentVolumeClaim"] == {"claimName": "vllm-drafts", "readOnly": True}
    assert "nvidia.com/gpu" not in str(pod["containers"][0]["resources"])
    assert "tolerations" not in pod  # the GPU node pool's scheduling only with GPUs
    overlay = yaml.safe_load(
        next(f for f in files if str(f.path).endswith("dflash2/kustomization.yaml")).content
    )
    assert overlay["namespace"] == "llm"


def test_every_overlay_resolves_to_the_service_and_its_deployment(
    default_stack: Stack, tmp_path: Path
) -> None:
    """What `kubectl apply -k overlays/VARIANT` gets: the base's Service plus one Deployment."""
    for file in render_kubernetes(default_stack, [], tmp_path):
        file.path.parent.mkdir(parents=True, exist_ok=True)
        file.path.write_text(file.content)

    def build(directory: Path) -> list[dict]:
        kustomization = yaml.safe_load((directory / "kustomization.yaml").read_text())
        assert kustomization["apiVersion"] == "kustomize.config.k8s.io/v1beta1"
        found: list[dict] = []
        for resource in kustomization["resources"]:
            path = (directory / resource).resolve()
            found += build(path) if path.is_dir() else [yaml.safe_load(path.read_text())]
        return found

    for variant in VARIANTS:
        docs = build(tmp_path / "overlays" / variant)
        kinds = ["Deployment", "Deployment", "PodDisruptionBudget", "Service", "Service"]
        assert sorted(d["kind"] for d in docs) == kinds
        named = {(d["kind"], d["metadata"]["name"]): d for d in docs}
        name = default_stack.service
        shared, internal = named["Service", name], named["Service", f"{name}-variant"]
        gateway, variant = named["Deployment", f"{name}-gateway"], named["Deployment", name]
        # clients reach the gateway on the shared port; the gateway reaches the variant
        gateway_pods = gateway["spec"]["template"]["metadata"]["labels"]
        assert shared["spec"]["selector"].items() <= gateway_pods.items()
        assert shared["spec"]["ports"][0]["port"] == default_stack.port
        variant_pods = variant["spec"]["template"]["metadata"]["labels"]
        assert internal["spec"]["selector"].items() <= variant_pods.items()
        assert not internal["spec"]["selector"].items() <= gateway_pods.items()
        env = {e["name"]: e.get("value") for e in gateway["spec"]["template"]["spec"]["containers"][0]["env"]}
        assert env["GATEWAY_UPSTREAM"] == f"http://{default_stack.service}-variant:8000"


def test_invalid_kubernetes_names_are_refused(default_stack: Stack, tmp_path: Path) -> None:
    with pytest.raises(RenderError, match=r"stack\.service = 'my_service' is not a valid Kubernetes name"):
        render_kubernetes(replace(default_stack, service="my_service"), [], tmp_path)


def test_cli_check_passes_on_the_committed_tree_and_finds_stale_copies(
    empty_env_file: Path, tmp_path: Path
) -> None:
    runner = CliRunner()
    result = runner.invoke(
        main, ["--env-file", str(empty_env_file), "render", "--target", "kubernetes", "--check"]
    )
    assert result.exit_code == 0, result.output
    assert f"{5 + 2 * len(VARIANTS)} rendered file(s) are current" in result.stdout
    copy_dir = tmp_path / "k"
    shutil.copytree(REPO / "kubernetes", copy_dir)
    stale = copy_dir / "overlays" / "mtp" / "deployment.yaml"
    stale.write_text(stale.read_text().replace("Recreate", "RollingUpdate"))
    args = [
        "--env-file",
        str(empty_env_file),
        "render",
        "--target",
        "kubernetes",
        "--check",
        "--out",
        str(copy_dir),
    ]
    result = runner.invoke(main, args)
    assert result.exit_code == 1
    assert "stale: " in result.stdout and "mtp/deployment.yaml" in result.stdout
    assert "--target kubernetes" in result.stderr


def test_cli_writes_only_changed_files_and_names_bad_settings(empty_env_file: Path, tmp_path: Path) -> None:
    runner = CliRunner()
    base = ["--env-file", str(empty_env_file)]
    out = ["render", "--target", "kubernetes", "--out", str(tmp_path)]
    files = 5 + 2 * len(VARIANTS)  # the base's five, two per variant
    assert runner.invoke(main, [*base, *out]).stdout.count("wrote: ") == files
    assert runner.invoke(main, [*base, *out]).stdout.count("unchanged: ") == files
    result = runner.invoke(main, [*base, "--set", "kubernetes.models=nfs", *out])
    assert result.exit_code == 2
    assert "kubernetes.models" in result.stderr and "hostPath" in result.stderr and "pvc" in result.stderr
    result = runner.invoke(main, [*base, "--set", "images.vllm=vllm-sim:latest", *out])
    assert result.exit_code == 1 and "fixed tag" in result.stderr and "Traceback" not in result.output
