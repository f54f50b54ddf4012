"""The gateway's control channel on Kubernetes: `kubectl exec` into the gateway pod.

The same host-side client as the Docker path (`GatewayControl`, which runs
`python3 -m composer.gateway.ctl VERB ...` in the gateway's container and parses its
JSON), given an exec target that runs through `kubectl exec` instead of `docker exec`:
who may exec into the pod may hold, drain and release it, nobody else.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence

from composer.errors import GatewayControlError, KubectlFailed, SwapFailed
from composer.gateway.client import CALL_WAIT_S, GatewayControl
from composer.kube.kubectl import Kubectl
from composer.render.kubernetes import gateway_name
from composer.stack.model import Stack
from composer.swap.holding import SwapHold

READY_TIMEOUT_S = 30.0
GATEWAY_CONTAINER = "gateway"


class KubeExec:
    """An exec target (Docker SDK's `exec_run` shape) backed by `kubectl exec`."""

    def __init__(self, kubectl: Kubectl, target: str, container: str = GATEWAY_CONTAINER) -> None:
        self.kubectl = kubectl
        self.target = target
        self.container = container

    def exec_run(self, cmd: Sequence[str], demux: bool = True) -> tuple[int, tuple[bytes, bytes]]:
        """Run `cmd` in the pod; (exit code, (stdout, stderr)) with kubectl's messages redacted."""
        args = ["exec", self.target, "--container", self.container, "--", *cmd]
        done = self.kubectl.run(args, timeout=CALL_WAIT_S + 40, check=False)
        out, err = self.kubectl.redact(done.stdout), self.kubectl.redact(done.stderr)
        return done.returncode, (out.encode(), err.encode())


def gateway_exists(kubectl: Kubectl, stack: Stack) -> bool:
    """True when the cluster has the stack's gateway Deployment."""
    done = kubectl.run(["get", f"deployment/{gateway_name(stack)}", "--ignore-not-found", "--output", "name"])
    return bool(done.stdout.strip())


def kube_hold(kubectl: Kubectl, stack: Stack, say: Callable[[str], None]) -> SwapHold:
    """A SwapHold on the gateway pod once its control channel answers (SwapFailed if it never does)."""
    control = GatewayControl(KubeExec(kubectl, f"deployment/{gateway_name(stack)}"))
    deadline = time.monotonic() + READY_TIMEOUT_S
    while True:
        try:
            control.state()
            break
        except (GatewayControlError, KubectlFailed) as err:
            if time.monotonic() > deadline:
                raise SwapFailed(
                    f"the gateway pod does not answer its control channel through `kubectl exec`: {err}; "
                    f"check it with `kubectl logs deployment/{gateway_name(stack)}`"
                ) from err
            time.sleep(1.0)
    return SwapHold(control, stack.gateway.drain_timeout, say)
