"""Switch the serving variant on Kubernetes: apply, wait for the rollout, gate, undo on failure.

    write overlays/<variant> (resolved stack values) -> apply the API key Secret (stdin)
    -> kubectl apply -k -> kubectl rollout status --timeout -> readiness gate through
    the Service -> done; on a failed or timed-out rollout or a failed gate:
    kubectl rollout undo -> rollout status -> gate the previous variant.

The Deployment is one object for every variant (strategy Recreate), so the previous
variant is the Deployment's previous revision and `rollout undo` brings it back.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from composer import labels
from composer.engine.bootlog import redact, tail
from composer.engine.diagnose import hints
from composer.engine.health import Readiness, probe
from composer.errors import HealthCheckFailed, KubectlFailed, PreflightFailed, SwapFailed
from composer.kube.forward import service_url
from composer.kube.kubectl import Kubectl, last_line
from composer.render.files import write_atomic
from composer.render.kubernetes import render_kubernetes, secret_name
from composer.render.runfiles import state_dir
from composer.render.spec import API_KEY_VAR
from composer.render.target import Target
from composer.stack.model import Stack

Say = Callable[[str], None]
POLL = 0.5


def _quiet(message: str) -> None:
    """Progress sink that drops messages."""


@dataclass(frozen=True)
class KubeUpOptions:
    """How long to wait (rollout plus gate) and whether to undo a failed rollout."""

    timeout: float = 900.0
    rollback: bool = True


@dataclass
class KubeUpResult:
    """What the rollout did, with timings in seconds (the shape `up` prints)."""

    variant: str
    outcome: str
    previous: str | None = None
    timings: dict[str, float] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class Serving:
    """The Deployment as the cluster has it now."""

    variant: str | None
    config_hash: str | None
    served_name: str | None
    revision: str | None


def serving(kubectl: Kubectl, stack: Stack) -> Serving | None:
    """The variant the Deployment runs now (None when there is no Deployment yet)."""
    done = kubectl.run(["get", f"deployment/{stack.service}", "--ignore-not-found", "--output", "json"])
    if not done.stdout.strip():
        return None
    try:
        doc = json.loads(done.stdout)
        meta = doc["spec"]["template"]["metadata"]
    except (ValueError, KeyError, TypeError) as err:
        raise KubectlFailed(f"`kubectl get deployment/{stack.service}` printed no Deployment: {err}") from err
    pod_labels, notes = meta.get("labels") or {}, meta.get("annotations") or {}
    return Serving(
        variant=pod_labels.get(labels.VARIANT),
        config_hash=pod_labels.get(labels.CONFIG_HASH),
        served_name=notes.get(labels.SERVED_NAME),
        revision=(doc["metadata"].get("annotations") or {}).get("deployment.kubernetes.io/revision"),
    )


def write_overlay(stack: Stack, target: Target, directory: Path | None = None) -> Path:
    """Render the base and this variant's overlay with the stack's resolved values; return
    the overlay folder (under the state directory, named by the config hash)."""
    out = (directory or state_dir()) / stack.project / "kubernetes" / f"{target.name}-{target.hash}"
    for file in render_kubernetes(stack, [target.name], out):
        write_atomic(file)
    return out / "overlays" / target.name


def apply_secret(kubectl: Kubectl, stack: Stack) -> None:
    """Create or update the API key Secret; the key travels on stdin, never in argv or a file."""
    if not stack.api_key:
        raise PreflightFailed(
            f"{API_KEY_VAR} is not set: set it in .env (the Deployment reads it from a Secret)"
        )
    secret = {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": secret_name(stack), "labels": {labels.K8S_INSTANCE: stack.project}},
        "type": "Opaque",
        "stringData": {API_KEY_VAR: stack.api_key},
    }
    kubectl.run(["apply", "--filename", "-"], stdin=json.dumps(secret))


def rollout_status(kubectl: Kubectl, stack: Stack, timeout: float) -> None:
    """`kubectl rollout status` within `timeout` seconds; KubectlFailed with kubectl's reason."""
    seconds = max(1, int(timeout))
    done = kubectl.run(
        ["rollout", "status", f"deployment/{stack.service}", f"--timeout={seconds}s"],
        timeout=seconds + 30,
        check=False,
    )
    if done.returncode != 0:
        reason = last_line(done).removeprefix("error: ")
        raise KubectlFailed(f"the rollout did not finish: {reason}", returncode=done.returncode)


def gate(kubectl: Kubectl, stack: Stack, served_name: str, deadline: float, waiting: Say) -> None:
    """Probe the variant through the Service until it is ready (HealthCheckFailed otherwise)."""
    last = Readiness(False, "health", "not probed yet")
    with (
        service_url(kubectl, stack) as url,
        httpx.Client(timeout=httpx.Timeout(10.0, connect=2.0), trust_env=False) as http,
    ):
        while True:
            last = probe(http, url, served_name, stack.api_key)
            if last.ready:
                return
            if last.fatal:
                break
            waiting(f"waiting for {served_name} through the Service ({last.step}: {last.detail})")
            if time.monotonic() >= deadline:
                break
            time.sleep(POLL)
    raise HealthCheckFailed(f"not ready through the Service at {last.step}: {last.detail}")


def _log_tail(kubectl: Kubectl, stack: Stack) -> str:
    """The serving pod's last log lines, redacted ('' when kubectl cannot give them)."""
    try:
        done = kubectl.run(["logs", f"deployment/{stack.service}", "--tail=40"], timeout=30, check=False)
    except KubectlFailed:
        return ""
    return tail(redact(done.stdout, stack.api_key), 40) if done.returncode == 0 else ""


class KubeRollout:
    """One switch of the Deployment to a target variant."""

    def __init__(self, stack: Stack, kubectl: Kubectl, options: KubeUpOptions, progress: Say, waiting: Say):
        self.stack = stack
        self.kubectl = kubectl
        self.options = options
        self.say = progress
        self.waiting = waiting

    def roll(self, served_name: str) -> None:
        """Wait for the rollout, then gate through the Service, within the timeout."""
        deadline = time.monotonic() + self.options.timeout
        self.say(f"waiting for the rollout (kubectl rollout status, up to {self.options.timeout:.0f}s)")
        rollout_status(self.kubectl, self.stack, self.options.timeout)
        self.say("rolled out; gating through the Service")
        gate(self.kubectl, self.stack, served_name, max(deadline, time.monotonic() + 5), self.waiting)

    def up(self, target: Target) -> KubeUpResult:
        began = time.monotonic()
        before = serving(self.kubectl, self.stack)
        result = KubeUpResult(variant=target.name, outcome="started", previous=before and before.variant)
        overlay = write_overlay(self.stack, target)
        apply_secret(self.kubectl, self.stack)
        self.say(f"applying {target.name} (kubectl apply -k {overlay})")
        self.kubectl.run(["apply", "--kustomize", str(overlay)], timeout=120)
        try:
            self.roll(self.stack.served_model_name)
        except (KubectlFailed, HealthCheckFailed) as err:
            result.timings["total"] = time.monotonic() - began
            self.rollback(target, before, err)
        same = before is not None and before.config_hash == target.hash
        result.outcome = "unchanged" if same else "started"
        if same:
            result.notes.append(f"{target.name} already served with the same configuration")
        result.timings["total"] = time.monotonic() - began
        return result

    def rollback(self, target: Target, before: Serving | None, err: Exception) -> None:
        """Undo the rollout and gate the previous variant; always raises SwapFailed."""
        log = _log_tail(self.kubectl, self.stack)
        found = hints(log)
        message = f"{target.name} failed: {err}"
        changed = before is not None and before.config_hash != target.hash
        if not self.options.rollback or not changed or before is None:
            why = "--no-rollback" if not self.options.rollback else "no earlier revision to go back to"
            raise SwapFailed(f"{message}; not rolled back ({why})", log, found) from err
        self.say(f"rolling back to {before.variant} (kubectl rollout undo)")
        try:
            self.kubectl.run(["rollout", "undo", f"deployment/{self.stack.service}"])
            self.roll(before.served_name or self.stack.served_model_name)
        except (KubectlFailed, HealthCheckFailed) as again:
            raise SwapFailed(
                f"{message}; the rollback to {before.variant} failed too: {again}", log, found
            ) from err
        raise SwapFailed(f"{message}; rolled back to {before.variant}", log, found, rolled_back=True) from err


def up_kubernetes(
    stack: Stack,
    target: Target,
    *,
    kubectl: Kubectl | None = None,
    options: KubeUpOptions | None = None,
    progress: Say = _quiet,
    waiting: Say | None = None,
) -> KubeUpResult:
    """Switch the cluster's Deployment to `target`; raise SwapFailed (after undoing) on failure."""
    runner = KubeRollout(
        stack, kubectl or Kubectl.for_stack(stack), options or KubeUpOptions(), progress, waiting or progress
    )
    return runner.up(target)
