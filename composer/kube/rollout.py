"""What a Kubernetes rollout asks of the cluster, one kubectl verb at a time (called from
`composer.kube.execute`'s dispatch table), and how the gate reaches a Service (a configured
URL, or `kubectl port-forward`). The one-variant Deployment (strategy Recreate) is
one object for every variant: the variant before is its previous revision, and `kubectl
rollout undo` brings it back.
"""

from __future__ import annotations

import base64
import json
import re
import selectors
import subprocess
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx

from composer import labels
from composer.engine import retry
from composer.engine.bootlog import redact, tail
from composer.engine.gate import GateTarget
from composer.engine.health import probe
from composer.engine.retry import Pending
from composer.errors import HealthCheckFailed, KubectlFailed
from composer.kube.kubectl import Kubectl
from composer.render.files import write_atomic
from composer.render.kubernetes import Manifest, render_kubernetes, secret_name
from composer.render.runfiles import state_dir
from composer.render.spec import API_KEY_VAR
from composer.render.target import Target
from composer.stack.model import Stack
from composer.swap.execute import Say
from composer.swap.holding import warm_up

_FORWARDING = re.compile(r"Forwarding from (127\.0\.0\.1|\[::1\]):(\d+) -> \d+")
READY_WITHIN = 30.0  # seconds port-forward has to say where it listens


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
        yield f"http://127.0.0.1:{_local_port(proc, kubectl.redact)}"
    finally:
        # killed, not terminated: started inside an undo it inherits an ignored SIGTERM, and a
        # port-forward keeps nothing that a graceful stop would save
        proc.kill()
        proc.wait()


def _local_port(proc: subprocess.Popen[str], redact: Callable[[str], str]) -> int:
    """Read port-forward's output until it says which local port it listens on (what it
    said otherwise goes through the key redaction)."""
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
    raise KubectlFailed(redact(f"`kubectl port-forward` did not start forwarding (it said: {said})"))


MANAGER = "compose-spec"  # the field manager of what `up` applies server-side
LAST_APPLIED = "kubectl.kubernetes.io/last-applied-configuration"


@dataclass(frozen=True)
class ForwardedTarget(GateTarget):
    """A variant reached through `kubectl port-forward` at `forwarded` (a loopback GateTarget
    would become a remote Docker engine's host)."""

    forwarded: str = ""

    @property
    def url(self) -> str:
        return self.forwarded


def deployment(kubectl: Kubectl, name: str) -> Manifest | None:
    """The Deployment as the cluster has it (None when there is none)."""
    done = kubectl.run(["get", f"deployment/{name}", "--ignore-not-found", "--output", "json"])
    if not done.stdout.strip():
        return None
    try:
        return dict(json.loads(done.stdout))
    except (ValueError, TypeError) as err:
        raise KubectlFailed(f"`kubectl get deployment/{name}` printed no Deployment") from err


def pod_labels(doc: Manifest) -> dict[str, str]:
    """The labels of a Deployment's pod template."""
    template = (doc.get("spec") or {}).get("template") or {}
    return dict((template.get("metadata") or {}).get("labels") or {})


@dataclass(frozen=True)
class Serving:
    """What the one-variant Deployment runs now: its variant and configuration."""

    variant: str | None
    config_hash: str | None


def write_overlay(stack: Stack, target: Target) -> Path:
    """Render the base and the variant's overlay with the stack's resolved values under the
    state folder (named by the config hash); return the overlay folder."""
    out = state_dir() / stack.project / "kubernetes" / f"{target.name}-{target.hash}"
    for file in render_kubernetes(stack, [target.name], out):
        write_atomic(file)
    return out / "overlays" / target.name


def apply_secret(kubectl: Kubectl, stack: Stack) -> None:
    """Server-side apply the API key Secret from stdin (never argv or a file); remove a
    `last-applied-configuration` annotation, where client-side apply kept the key in clear."""
    assert stack.api_key  # up_kubernetes refuses a stack without one
    name = secret_name(stack)
    secret = {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": name, "labels": {labels.K8S_INSTANCE: stack.project}},
        "type": "Opaque",
        "data": {API_KEY_VAR: base64.b64encode(stack.api_key.encode()).decode()},
    }
    server_side = ["--server-side", f"--field-manager={MANAGER}", "--force-conflicts"]
    kubectl.run(["apply", *server_side, "--filename", "-"], stdin=json.dumps(secret))
    done = kubectl.run(["get", f"secret/{name}", "--output", "json"])
    try:
        annotations = json.loads(done.stdout)["metadata"].get("annotations") or {}
    except (ValueError, KeyError, TypeError, AttributeError) as err:
        raise KubectlFailed(f"`kubectl get secret/{name}` printed no Secret") from err
    if LAST_APPLIED in annotations:
        kubectl.run(["annotate", f"secret/{name}", f"{LAST_APPLIED}-"])


def rollout_status(kubectl: Kubectl, deployment: str, timeout: float) -> None:
    """`kubectl rollout status` within `timeout` seconds; KubectlFailed with kubectl's reason."""
    seconds = max(1, int(timeout))
    done = kubectl.run(
        ["rollout", "status", f"deployment/{deployment}", f"--timeout={seconds}s"],
        timeout=seconds + 30,
        check=False,
    )
    if done.returncode != 0:
        failed = kubectl.failed("the rollout did not finish", done)
        raise KubectlFailed(str(failed).replace(": error: ", ": ", 1), failed.command, done.returncode)


def gate(
    kubectl: Kubectl,
    stack: Stack,
    served_name: str,
    deadline: float,
    waiting: Say,
    headers: tuple[tuple[str, str], ...] = (),
    warmup: int = 0,
    service: tuple[str, int] | None = None,
    check: Callable[[str], object] | None = None,
) -> None:
    """Probe through the Service (the shared one, else `service`: name and port) until ready
    (else HealthCheckFailed), send `warmup` completions, then run `check` with its URL;
    `headers` pass the gateway's hold."""
    with (
        service_url(kubectl, stack, *service) if service else service_url(kubectl, stack) as url,
        httpx.Client(
            timeout=httpx.Timeout(10.0, connect=2.0), headers=dict(headers), trust_env=False
        ) as http,
    ):

        def attempt() -> None:
            last = probe(http, url, served_name, stack.api_key)
            if last.fatal:
                raise HealthCheckFailed(f"not ready through the Service at {last.step}: {last.detail}")
            if not last.ready:
                waiting(f"waiting for {served_name} through the Service ({last.step}: {last.detail})")
                raise Pending(f"not ready through the Service at {last.step}: {last.detail}")

        try:
            retry.service_readiness(deadline)(attempt)
        except Pending as timed_out:
            raise HealthCheckFailed(str(timed_out)) from None
        try:
            warm_up(ForwardedTarget(served_name, 0, "", served_name, stack.api_key, headers, url), warmup)
        except httpx.HTTPError as err:
            raise HealthCheckFailed(f"a warm-up completion failed: {err}") from err
        if check is not None:
            check(url)


def pod_log_tail(kubectl: Kubectl, stack: Stack, deployment: str) -> str:
    """The Deployment's last log lines, redacted ('' when kubectl cannot give them)."""
    try:
        done = kubectl.run(["logs", f"deployment/{deployment}", "--tail=40"], timeout=30, check=False)
    except KubectlFailed:
        return ""
    return tail(redact(done.stdout, stack.api_key), 40) if done.returncode == 0 else ""
