"""The gateway image runs as its rendered Deployment's Pod Security "restricted" settings say:
uid/gid 10001, a read-only root filesystem with writable emptyDirs (tmpfs here) only where
mounted, all capabilities dropped, no privilege escalation; and its control channel works
there (what `up --target kubernetes` drives through `kubectl exec`)."""

from __future__ import annotations

import os
import time
import uuid
from pathlib import Path

import httpx
import pytest
import yaml

from composer.gateway import GatewayControl
from composer.render.kube_security import restricted_violations
from tests.conftest import REPO, free_port
from tests.gateway.dockerlab import GATEWAY_IMAGE

pytestmark = pytest.mark.docker
KEY = "sk-hardened-gateway-0123456789abcdef"


def _empty_dir(path: Path, fs_group: int) -> Path:
    """A host folder as the kubelet makes an emptyDir: mode 0777, then group fsGroup with setgid."""
    path.mkdir()
    os.chown(path, -1, fs_group)
    path.chmod(0o2777)
    return path


def test_the_gateway_runs_under_its_restricted_pod_settings(docker_client, tmp_path: Path) -> None:
    try:
        docker_client.images.get(GATEWAY_IMAGE)
    except Exception:
        pytest.fail(f"{GATEWAY_IMAGE} is missing: run `make image-gateway` (make test does)")
    doc = yaml.safe_load((REPO / "kubernetes" / "base" / "gateway-deployment.yaml").read_text())
    assert restricted_violations(doc) == []
    pod = doc["spec"]["template"]["spec"]
    container_spec = pod["containers"][0]
    sc, pod_sc = container_spec["securityContext"], pod["securityContext"]
    env = {e["name"]: e["value"] for e in container_spec["env"] if "value" in e}
    env |= {"VLLM_API_KEY": KEY, "GATEWAY_UPSTREAM": "http://127.0.0.1:9"}  # no variant yet: it holds
    port = free_port()
    assert sc["allowPrivilegeEscalation"] is False and pod_sc["seccompProfile"] == {"type": "RuntimeDefault"}
    container = docker_client.containers.run(
        GATEWAY_IMAGE,
        detach=True,
        name=f"vct-kube-gw-{uuid.uuid4().hex[:8]}",
        labels={"vct-kube.hardened": "1"},
        environment=env,
        user=f"{pod_sc['runAsUser']}:{pod_sc['runAsGroup']}",
        group_add=[str(pod_sc["fsGroup"])],
        read_only=sc["readOnlyRootFilesystem"],
        cap_drop=sc["capabilities"]["drop"],
        security_opt=["no-new-privileges"],  # Docker's default seccomp profile is RuntimeDefault
        volumes={
            str(_empty_dir(tmp_path / mount["name"], pod_sc["fsGroup"])): {
                "bind": mount["mountPath"],
                "mode": "rw",
            }
            for mount in container_spec["volumeMounts"]
        },
        ports={f"{container_spec['ports'][0]['containerPort']}/tcp": ("127.0.0.1", port)},
    )
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                if (
                    httpx.get(
                        f"http://127.0.0.1:{port}/gateway/health", timeout=2, trust_env=False
                    ).status_code
                    == 200
                ):
                    break
            except httpx.HTTPError:
                pass
            container.reload()
            assert container.status == "running", container.logs().decode(errors="replace")
            assert time.monotonic() < deadline, container.logs().decode(errors="replace")
            time.sleep(0.2)
        control = GatewayControl(container)
        hold = control.hold(30, owner="kube-test")
        assert [h.id for h in control.state().holds] == [hold.id]
        assert control.release(hold.id) == [hold.id]
        code, out = container.exec_run(["id", "-u"])
        assert (code, out.decode().strip()) == (0, "10001")
        code, out = container.exec_run(["python3", "-c", "open('/opt/gateway/x', 'w')"])
        assert code != 0 and b"Read-only file system" in out
        code, out = container.exec_run(["python3", "-c", "print(open('/proc/self/status').read())"])
        effective = next(line for line in out.decode().splitlines() if line.startswith("CapEff:"))
        assert effective.split()[1] == "0000000000000000"
        assert b"NoNewPrivs:\t1" in out
    finally:
        container.remove(force=True)
