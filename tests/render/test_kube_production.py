"""Kubernetes manifests for production: the `[kubernetes]` table's settings, Pod Security
levels (the published rules, each tested on a manifest that breaks it), disruption budgets,
monitoring objects, and bad values refused with exit 2 naming the key."""

from __future__ import annotations

import copy
from dataclasses import replace
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml
from click.testing import CliRunner

from composer.cli import main
from composer.errors import ConfigError
from composer.gateway.config import DEFAULT_CONTROL_SOCKET
from composer.render import kube_security
from composer.render.kubernetes import CONTROL_SOCKET_DIR, render_kubernetes
from composer.stack.load import load_stack
from composer.stack.model import Stack
from tests.conftest import shipped_variants

from .test_kubernetes import _container, _deployment, _resources, _write_resources, validate

PRODUCTION = (
    'kubernetes.resources={server = {requests = {cpu = "16", memory = "96Gi"}, limits = {memory = "128Gi"}}, '
    'dflash2 = {requests = {memory = "110Gi"}}, gateway = {limits = {cpu = "2"}}}',
    "kubernetes.shm_size=16GiB",
    'kubernetes.node_selector={"nvidia.com/gpu.product" = "NVIDIA-GeForce-RTX-4090"}',
    'kubernetes.tolerations=[{key = "nvidia.com/gpu", operator = "Exists", effect = "NoSchedule"}, '
    '{key = "pool", operator = "Equal", value = "llm", effect = "NoExecute", tolerationSeconds = 300}]',
    "kubernetes.runtime_class=nvidia",
    "kubernetes.priority_class=llm-serving",
    "kubernetes.service_account=vllm",
    "kubernetes.image_pull_policy=Always",
    'kubernetes.image_pull_secrets=["regcred"]',
    "kubernetes.pdb=all",
    "kubernetes.liveness=20m",
    "kubernetes.service_monitor=true",
    'kubernetes.monitor_labels={release = "kube-prometheus-stack"}',
    "kubernetes.scrape_annotations=true",
    "kubernetes.models=pvc",
)
# The fields of monitoring.coreos.com/v1 ServiceMonitor that render writes, as the
# Prometheus Operator's CRD defines them; kubernetes-validate has no CRD schemas.
_NAME = {"type": "string", "pattern": r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$", "maxLength": 63}
_STRINGS = {"type": "object", "additionalProperties": {"type": "string"}}
SERVICE_MONITOR_SCHEMA: dict[str, Any] = {
    "type": "object",
    "required": ["apiVersion", "kind", "metadata", "spec"],
    "additionalProperties": False,
    "properties": {
        "apiVersion": {"const": "monitoring.coreos.com/v1"},
        "kind": {"const": "ServiceMonitor"},
        "metadata": {
            "type": "object",
            "required": ["name"],
            "additionalProperties": False,
            "properties": {"name": _NAME, "namespace": _NAME, "labels": _STRINGS},
        },
        "spec": {
            "type": "object",
            "required": ["selector", "endpoints"],
            "additionalProperties": False,
            "properties": {
                "selector": {
                    "type": "object",
                    "additionalProperties": False,
                    "properties": {"matchLabels": _STRINGS},
                },
                "endpoints": {
                    "type": "array",
                    "minItems": 1,
                    "items": {
                        "type": "object",
                        "additionalProperties": False,
                        "properties": {
                            "port": {"type": "string"},
                            "path": {"type": "string", "pattern": "^/"},
                            "interval": {"type": "string", "pattern": r"^(0|([0-9]+(ms|s|m|h))+)$"},
                            "scheme": {"enum": ["http", "https"]},
                        },
                    },
                },
            },
        },
    },
}


def _stack(*flags: str) -> Stack:
    return load_stack(None, None, environ={}, flags=flags)


def _gateway(files: list) -> dict:
    return next(doc for doc in _resources(files) if doc["metadata"]["name"] == "vllm-gateway")


def test_the_shipped_gateway_meets_restricted_and_vllm_on_a_pvc_meets_baseline(
    default_stack: Stack, tmp_path: Path
) -> None:
    committed = yaml.safe_load((Path("kubernetes") / "base" / "gateway-deployment.yaml").read_text())
    assert kube_security.restricted_violations(committed) == []
    hostpath = yaml.safe_load((Path("kubernetes") / "overlays" / "mtp" / "deployment.yaml").read_text())
    assert kube_security.baseline_violations(hostpath) == [
        "spec.volumes[0].hostPath: hostPath volumes are not allowed"
    ]
    pvc = replace(default_stack, kubernetes=replace(default_stack.kubernetes, models="pvc"))
    files = render_kubernetes(pvc, [], tmp_path)
    for variant in ("baseline", "mtp", "dflash2"):
        deployment = _deployment(files, variant)
        assert kube_security.pod_security_level(deployment) == "baseline"
        header = next(f for f in files if str(f.path).endswith(f"{variant}/deployment.yaml")).content
        assert "# Pod Security: meets 'baseline'." in header
    assert (
        "Pod Security: meets 'privileged'. The hostPath"
        in (Path("kubernetes") / "overlays" / "mtp" / "deployment.yaml").read_text()
    )


def _set(path: str, value: object):
    def change(doc: dict) -> None:
        node = doc["spec"]["template"]
        keys = path.split(".")
        for key in keys[:-1]:
            node = node[int(key)] if isinstance(node, list) else node.setdefault(key, {})
        node[keys[-1]] = value

    return change


def _drop(path: str):
    def change(doc: dict) -> None:
        node = doc["spec"]["template"]
        keys = path.split(".")
        for key in keys[:-1]:
            node = node[int(key)] if isinstance(node, list) else node[key]
        del node[keys[-1]]

    return change


C = "spec.containers.0.securityContext"
BASELINE_BREAKS = {
    "host network": (_set("spec.hostNetwork", True), "spec.hostNetwork"),
    "host PID": (_set("spec.hostPID", True), "spec.hostPID"),
    "host IPC": (_set("spec.hostIPC", True), "spec.hostIPC"),
    "HostProcess": (_set("spec.securityContext.windowsOptions", {"hostProcess": True}), "hostProcess"),
    "privileged": (_set(f"{C}.privileged", True), "privileged containers"),
    "capability": (_set(f"{C}.capabilities.add", ["SYS_ADMIN"]), "['SYS_ADMIN'] are not allowed"),
    "hostPath": (
        _set("spec.volumes", [{"name": "h", "hostPath": {"path": "/"}}]),
        "hostPath volumes are not allowed",
    ),
    "host port": (_set("spec.containers.0.ports.0.hostPort", 8000), "host ports"),
    "AppArmor field": (_set(f"{C}.appArmorProfile", {"type": "Unconfined"}), "appArmorProfile.type"),
    "AppArmor annotation": (
        _set(
            "metadata.annotations", {"container.apparmor.security.beta.kubernetes.io/gateway": "unconfined"}
        ),
        "AppArmor profile 'unconfined'",
    ),
    "SELinux type": (_set(f"{C}.seLinuxOptions", {"type": "spc_t"}), "seLinuxOptions.type"),
    "SELinux user": (_set("spec.securityContext.seLinuxOptions", {"user": "root"}), "seLinuxOptions.user"),
    "proc mount": (_set(f"{C}.procMount", "Unmasked"), "procMount"),
    "seccomp unconfined": (_set(f"{C}.seccompProfile", {"type": "Unconfined"}), "Unconfined is not allowed"),
    "sysctl": (
        _set("spec.securityContext.sysctls", [{"name": "kernel.msgmax", "value": "1"}]),
        "sysctl 'kernel.msgmax'",
    ),
}
RESTRICTED_BREAKS = {
    "volume type": (
        _set("spec.volumes", [{"name": "n", "nfs": {"server": "x", "path": "/"}}]),
        "volume type ['nfs']",
    ),
    "privilege escalation": (
        _drop(f"{C}.allowPrivilegeEscalation"),
        "allowPrivilegeEscalation: must be false",
    ),
    "non-root missing": (
        lambda d: (_drop(f"{C}.runAsNonRoot")(d), _drop("spec.securityContext.runAsNonRoot")(d)),
        "runAsNonRoot: must be true",
    ),
    "non-root false": (_set("spec.securityContext.runAsNonRoot", False), "runAsNonRoot: must not be false"),
    "root user": (_set(f"{C}.runAsUser", 0), "runAsUser: must not be 0"),
    "seccomp missing": (_drop("spec.securityContext.seccompProfile"), "must be RuntimeDefault or Localhost"),
    "capabilities not dropped": (_set(f"{C}.capabilities", {}), "capabilities.drop: must include ALL"),
    "capability added": (
        _set(f"{C}.capabilities", {"drop": ["ALL"], "add": ["CHOWN"]}),
        "only NET_BIND_SERVICE",
    ),
}


def _broken(stack: Stack, tmp_path: Path, rule: tuple[Any, str]) -> tuple[dict, str]:
    """The rendered gateway Deployment with one rule broken, and the message that names it."""
    doc = copy.deepcopy(_gateway(render_kubernetes(stack, ["mtp"], tmp_path)))
    change, message = rule
    change(doc)
    return doc, message


@pytest.mark.parametrize("rule", sorted(BASELINE_BREAKS))
def test_each_baseline_rule_is_checked(default_stack: Stack, tmp_path: Path, rule: str) -> None:
    doc, message = _broken(default_stack, tmp_path, BASELINE_BREAKS[rule])
    found = kube_security.baseline_violations(doc)
    assert len(found) == 1 and message in found[0], found
    assert kube_security.pod_security_level(doc) == "privileged"


@pytest.mark.parametrize("rule", sorted(RESTRICTED_BREAKS))
def test_each_restricted_rule_is_checked(default_stack: Stack, tmp_path: Path, rule: str) -> None:
    doc, message = _broken(default_stack, tmp_path, RESTRICTED_BREAKS[rule])
    found = kube_security.restricted_violations(doc)
    assert found and all(message in f for f in found), found
    assert kube_security.baseline_violations(doc) == []
    assert kube_security.pod_security_level(doc) == "baseline"


def test_the_gateway_is_hardened_and_outlives_its_drain(default_stack: Stack, tmp_path: Path) -> None:
    doc = _gateway(render_kubernetes(default_stack, ["mtp"], tmp_path))
    pod = doc["spec"]["template"]["spec"]
    container = _container(doc)
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    assert pod["securityContext"]["runAsUser"] == 10001 and pod["automountServiceAccountToken"] is False
    mounts = {m["mountPath"]: m["name"] for m in container["volumeMounts"]}
    assert str(Path(DEFAULT_CONTROL_SOCKET).parent) == CONTROL_SOCKET_DIR and CONTROL_SOCKET_DIR in mounts
    assert pod["terminationGracePeriodSeconds"] > default_stack.gateway.drain_timeout
    assert container["lifecycle"]["preStop"] == {"sleep": {"seconds": 5}}
    assert container["resources"]["requests"]["memory"] == "128Mi"
    assert doc["spec"]["strategy"]["rollingUpdate"] == {"maxSurge": 1, "maxUnavailable": 0}


def test_production_settings_render_valid_manifests(tmp_path: Path) -> None:
    stack = _stack(*PRODUCTION)
    files = render_kubernetes(stack, [], tmp_path / "out")
    resources = _resources(files)
    monitors = [d for d in resources if d["kind"] == "ServiceMonitor"]
    rest = [d for d in resources if d["kind"] != "ServiceMonitor"]
    kinds = sorted(d["kind"] for d in rest)
    assert (
        kinds
        == ["Deployment"] * (len(shipped_variants()) + 1) + ["PodDisruptionBudget"] * 2 + ["Service"] * 2
    )
    (tmp_path / "v").mkdir()
    done = validate(_write_resources(rest, tmp_path / "v"))
    assert done.returncode == 0 and done.stdout.count(" passed ") == len(rest), done.stdout + done.stderr
    # ServiceMonitor: a CRD that kubernetes-validate does not know; checked against its fields.
    assert {m["spec"]["endpoints"][0]["path"] for m in monitors} == {"/gateway/metrics", "/metrics"}
    for monitor in monitors:
        jsonschema.validate(monitor, SERVICE_MONITOR_SCHEMA)
        assert monitor["metadata"]["labels"]["release"] == "kube-prometheus-stack"
        selected = next(
            d for d in rest if d["kind"] == "Service" and d["metadata"]["name"] == monitor["metadata"]["name"]
        )
        assert monitor["spec"]["selector"]["matchLabels"].items() <= selected["metadata"]["labels"].items()
    bad = copy.deepcopy(monitors[0])
    bad["spec"]["endpoints"][0]["intervall"] = "30s"
    with pytest.raises(jsonschema.ValidationError, match="intervall"):
        jsonschema.validate(bad, SERVICE_MONITOR_SCHEMA)

    mtp, dflash2 = _deployment(files, "mtp"), _deployment(files, "dflash2")
    pod = mtp["spec"]["template"]["spec"]
    assert pod["nodeSelector"] == {"nvidia.com/gpu.product": "NVIDIA-GeForce-RTX-4090"}
    assert pod["tolerations"][1] == {
        "key": "pool",
        "operator": "Equal",
        "value": "llm",
        "effect": "NoExecute",
        "tolerationSeconds": 300,
    }
    assert (pod["runtimeClassName"], pod["priorityClassName"], pod["serviceAccountName"]) == (
        "nvidia",
        "llm-serving",
        "vllm",
    )
    assert pod["imagePullSecrets"] == [{"name": "regcred"}]
    assert _container(mtp)["imagePullPolicy"] == "Always"
    assert _container(mtp)["resources"] == {
        "requests": {"cpu": "16", "memory": "96Gi", "ephemeral-storage": "10Gi"},
        "limits": {"memory": "128Gi", "nvidia.com/gpu": 4},
    }
    assert _container(dflash2)["resources"]["requests"]["memory"] == "110Gi"
    assert _container(_gateway(files))["resources"]["limits"]["cpu"] == "2"
    liveness = _container(mtp)["livenessProbe"]
    assert liveness["periodSeconds"] * liveness["failureThreshold"] >= 20 * 60
    assert {v["name"]: v for v in pod["volumes"]}["dshm"]["emptyDir"]["sizeLimit"] == "16Gi"
    assert mtp["spec"]["template"]["metadata"]["annotations"]["prometheus.io/path"] == "/metrics"
    assert "tolerations" not in _gateway(files)["spec"]["template"]["spec"]  # a gateway needs no GPU node


def test_default_memory_request_counts_the_weights_ranks_and_shm(
    default_stack: Stack, tmp_path: Path
) -> None:
    heavy = replace(default_stack.variants["mtp"], weights_bytes=14 * 2**30)
    stack = replace(default_stack, variants={**default_stack.variants, "mtp": heavy})
    requests = _container(_deployment(render_kubernetes(stack, ["mtp"], tmp_path), "mtp"))["resources"][
        "requests"
    ]
    assert requests["memory"] == f"{14 * 4 + 4 * 4 + 8}Gi" and requests["cpu"] == "8"


BAD = [
    ('kubernetes.resources={server = {requests = {cpu = "lots"}}}', "resources.server.requests.cpu"),
    ('kubernetes.resources={gateway = {requests = {gpu = "1"}}}', "resources.gateway.requests.gpu"),
    ('kubernetes.resources={server = {limits = {"nvidia.com/gpu" = 2}}}', "tensor_parallel_size"),
    ('kubernetes.resources={mpt = {requests = {cpu = "1"}}}', "kubernetes.resources.mpt: not a variant"),
    (
        'kubernetes.resources={server = {requests = {memory = "64Gi"}, limits = {memory = "32Gi"}}}',
        "requests.memory = '64Gi' is above limits.memory",
    ),
    ('kubernetes.resources={server = {limits = {memory = "8Gi"}}}', "resources.server.limits.memory = '8Gi'"),
    ('kubernetes.tolerations=[{key = "a", operator = "Sometimes"}]', "tolerations[0].operator"),
    ('kubernetes.tolerations=[{operator = "Equal", value = "x"}]', "tolerations[0]: a key is needed"),
    (
        'kubernetes.tolerations=[{key = "a", effect = "NoSchedule", tolerationSeconds = 5}]',
        "tolerationSeconds",
    ),
    ('kubernetes.tolerations={key = "a"}', "kubernetes.tolerations"),
    ('kubernetes.node_selector={"a b" = "c"}', "kubernetes.node_selector"),
    ("kubernetes.liveness=5m", "kubernetes.liveness = 300s: shorter than stack.start_period"),
    ("kubernetes.gateway_grace=30s", "kubernetes.gateway_grace = 30s: not longer than gateway.drain_timeout"),
    ("kubernetes.image_pull_policy=Sometimes", "kubernetes.image_pull_policy"),
    ("kubernetes.runtime_class=Nvidia_GPU", "kubernetes.runtime_class"),
]


@pytest.mark.parametrize(("flag", "message"), BAD, ids=[m for _, m in BAD])
def test_bad_values_are_refused_naming_the_key(
    empty_env_file: Path, tmp_path: Path, flag: str, message: str
) -> None:
    out = tmp_path / "out"
    result = CliRunner().invoke(
        main,
        [
            "--env-file",
            str(empty_env_file),
            "--set",
            flag,
            "render",
            "--target",
            "kubernetes",
            "--out",
            str(out),
        ],
    )
    assert result.exit_code == 2, result.output
    assert message in result.stderr and "Traceback" not in result.output
    assert len(result.stderr.strip().splitlines()) == 1
    assert not out.exists()  # nothing written


def test_pdb_none_and_no_gateway(default_stack: Stack, tmp_path: Path) -> None:
    none = _stack("kubernetes.pdb=false")
    assert not [
        d for d in _resources(render_kubernetes(none, [], tmp_path)) if d["kind"] == "PodDisruptionBudget"
    ]
    direct = _stack("gateway.enabled=false", "kubernetes.pdb=all", "kubernetes.service_monitor=true")
    docs = _resources(render_kubernetes(direct, [], tmp_path))
    budgets = [d for d in docs if d["kind"] == "PodDisruptionBudget"]
    assert [b["metadata"]["name"] for b in budgets] == ["vllm"]
    monitors = [d for d in docs if d["kind"] == "ServiceMonitor"]
    assert [(m["metadata"]["name"], m["spec"]["endpoints"][0]["path"]) for m in monitors] == [
        ("vllm", "/metrics")
    ]
    with pytest.raises(ConfigError):
        render_kubernetes(_stack("kubernetes.liveness=1m"), [], tmp_path)
