"""How the readiness gate reaches the Service: a configured URL, or `kubectl port-forward`."""

from __future__ import annotations

import re
import selectors
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager

from composer.errors import KubectlFailed
from composer.kube.kubectl import Kubectl
from composer.stack.model import Stack

_FORWARDING = re.compile(r"Forwarding from (127\.0\.0\.1|\[::1\]):(\d+) -> \d+")
READY_WITHIN = 30.0


@contextmanager
def service_url(
    kubectl: Kubectl, stack: Stack, service: str | None = None, port: int | None = None
) -> Iterator[str]:
    """The Service's base URL from this machine while the block runs: `kubernetes.service_url`
    (env KUBE_SERVICE_URL) for the shared Service when set, else `kubectl port-forward
    service/NAME :PORT` on a free local port, stopped when the block ends."""
    if stack.kubernetes.service_url and service is None:
        yield stack.kubernetes.service_url
        return
    proc = kubectl.popen(["port-forward", f"service/{service or stack.service}", f":{port or stack.port}"])
    try:
        try:
            port = _local_port(proc)
        except KubectlFailed as err:  # what kubectl said goes through the key redaction too
            raise KubectlFailed(kubectl.redact(str(err))) from err
        yield f"http://127.0.0.1:{port}"
    finally:
        # killed, not terminated: started inside an undo it inherits an ignored SIGTERM, and a
        # port-forward keeps nothing that a graceful stop would save
        proc.kill()
        proc.wait()


def _local_port(proc: subprocess.Popen[str]) -> int:
    """Read port-forward's output until it says which local port it listens on."""
    assert proc.stdout is not None
    deadline = time.monotonic() + READY_WITHIN
    seen: list[str] = []
    with selectors.DefaultSelector() as selector:
        selector.register(proc.stdout, selectors.EVENT_READ)
        while time.monotonic() < deadline:
            if not selector.select(timeout=max(0.0, deadline - time.monotonic())):
                break
            line = proc.stdout.readline()
            if not line:
                break
            seen.append(line.strip())
            match = _FORWARDING.search(line)
            if match and match.group(1) == "127.0.0.1":
                return int(match.group(2))
    proc.kill()
    said = next((s for s in reversed(seen) if s), "nothing")
    raise KubectlFailed(f"`kubectl port-forward` did not start forwarding (it said: {said})")
