"""The gateway's control channel on Kubernetes: the host-side `GatewayControl` of the Docker
path, given an exec target that runs `kubectl exec` into the gateway pod instead of `docker
exec` (who may exec into the pod may hold, drain and release it, nobody else).
"""

from __future__ import annotations

import json
from collections.abc import Sequence

from composer.engine import retry
from composer.errors import GatewayControlError, KubectlFailed, SwapFailed
from composer.gateway.host.client import CALL_WAIT_S, GatewayControl
from composer.kube.kubectl import Kubectl
from composer.render.kubernetes import GATEWAY_COMPONENT, gateway_name, selector_labels
from composer.stack.model import Stack

READY_TIMEOUT_S = 30.0


class KubeExec:
    """An exec target (Docker SDK's `exec_run` shape) backed by `kubectl exec`."""

    def __init__(self, kubectl: Kubectl, target: str) -> None:
        self.kubectl = kubectl
        self.target = target

    def exec_run(self, cmd: Sequence[str], demux: bool = True) -> tuple[int, tuple[bytes, bytes]]:
        """Run `cmd` in the pod; (exit code, (stdout, stderr)) with kubectl's messages redacted."""
        args = ["exec", self.target, "--container", "gateway", "--", *cmd]
        done = self.kubectl.run(args, timeout=CALL_WAIT_S + 40, check=False)
        out, err = self.kubectl.redact(done.stdout), self.kubectl.redact(done.stderr)
        return done.returncode, (out.encode(), err.encode())


def gateway_pod(kubectl: Kubectl, stack: Stack) -> str | None:
    """`pod/NAME` of the gateway's newest running, ready pod that is not terminating (every
    control call of one switch goes to it: the hold it sets is the one it releases)."""
    selector = ",".join(f"{k}={v}" for k, v in selector_labels(stack, GATEWAY_COMPONENT).items())
    done = kubectl.run(["get", "pods", "--selector", selector, "--output", "json"])
    try:
        pods = json.loads(done.stdout).get("items") or []
    except (ValueError, AttributeError) as err:
        raise KubectlFailed("`kubectl get pods` printed no pod list") from err
    ready = [
        pod
        for pod in pods
        if not pod["metadata"].get("deletionTimestamp")
        and (pod.get("status") or {}).get("phase") == "Running"
        and all(c.get("ready") for c in (pod.get("status") or {}).get("containerStatuses") or [{}])
    ]
    if not ready:
        return None
    newest = max(ready, key=lambda pod: pod["metadata"].get("creationTimestamp", ""))
    return f"pod/{newest['metadata']['name']}"


def kube_control(kubectl: Kubectl, stack: Stack) -> GatewayControl:
    """The gateway pod's control client once its control channel answers (SwapFailed if it never does)."""

    def answers() -> GatewayControl:
        pod = gateway_pod(kubectl, stack)
        if pod is None:
            raise KubectlFailed(f"no running, ready pod of deployment/{gateway_name(stack)}")
        control = GatewayControl(KubeExec(kubectl, pod))
        control.state()
        return control

    try:
        return retry.kube_control_ready(READY_TIMEOUT_S, (GatewayControlError, KubectlFailed))(answers)
    except (GatewayControlError, KubectlFailed) as err:
        raise SwapFailed(
            f"the gateway pod does not answer its control channel through `kubectl exec`: {err}; "
            f"check it with `kubectl logs deployment/{gateway_name(stack)}`"
        ) from err
