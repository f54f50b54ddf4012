"""Switch the serving variant on Kubernetes: drain, apply, wait, gate, release; undo on failure.

    take the project's swap lock (the same as the Docker path's)
    -> write overlays/<variant> (resolved stack values) -> server-side apply the API key
    Secret (stdin) -> with a gateway pod: drain it through `kubectl exec` (new requests
    wait, requests in flight finish) -> kubectl apply -k -> kubectl rollout status
    --timeout -> readiness gate and warm-up through the Service, past the hold -> release
    the held requests; on a failed or timed-out rollout, a failed gate, Ctrl-C, SIGTERM
    or SIGHUP: kubectl rollout undo -> rollout status -> gate the previous variant, all
    under the same hold, then release.

The Deployment is one object for every variant (strategy Recreate), so the previous
variant is the Deployment's previous revision and `rollout undo` brings it back.
"""

from __future__ import annotations

import base64
import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import yaml

from composer import labels
from composer.engine import retry
from composer.engine.bootlog import redact, tail
from composer.engine.diagnose import hints
from composer.engine.health import Readiness, probe
from composer.engine.retry import Pending
from composer.errors import ComposerError, HealthCheckFailed, KubectlFailed, PreflightFailed, SwapFailed
from composer.kube.control import cluster_gateway_hash, kube_hold
from composer.kube.forward import service_url
from composer.kube.kubectl import Kubectl
from composer.render.files import write_atomic
from composer.render.kubernetes import gateway_name, render_kubernetes, secret_name
from composer.render.runfiles import state_dir
from composer.render.spec import API_KEY_VAR
from composer.render.target import Target
from composer.signals import handled, interrupt_once, interrupts_ignored
from composer.stack.model import Stack
from composer.swap.holding import WARMUP_PROMPT, SwapHold
from composer.swap.lock import swap_lock

Say = Callable[[str], None]
MANAGER = "compose-spec"
"""The field manager of what `up` applies server-side."""
LAST_APPLIED = "kubectl.kubernetes.io/last-applied-configuration"


def _quiet(message: str) -> None:
    """Progress sink that drops messages."""


@dataclass(frozen=True)
class KubeUpOptions:
    """How long to wait (rollout plus gate), whether to undo a failed rollout, whether to
    wait for another swap of the project (else LockBusy), and whether the drain waits for the
    streams too (`up --drain`) instead of letting them go on on the new variant."""

    timeout: float = 900.0
    rollback: bool = True
    wait_for_lock: bool = True
    drain: bool = False


@dataclass
class KubeUpResult:
    """What the rollout did, with timings in seconds (the shape `up` prints)."""

    variant: str
    outcome: str
    previous: str | None = None
    timings: dict[str, float] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    drained: dict[str, int] | None = None


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


NO_KEY = f"{API_KEY_VAR} is not set: set it in .env (the Deployment reads it from a Secret)"


def apply_secret(kubectl: Kubectl, stack: Stack) -> None:
    """Create or update the API key Secret by server-side apply: the key travels on stdin,
    never in argv or a file, and the object keeps no `last-applied-configuration`
    annotation (client-side apply would store the key there in clear text). An annotation
    left by an earlier client-side apply is removed."""
    if not stack.api_key:
        raise PreflightFailed(NO_KEY)
    name = secret_name(stack)
    secret = {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": name, "labels": {labels.K8S_INSTANCE: stack.project}},
        "type": "Opaque",
        "data": {API_KEY_VAR: base64.b64encode(stack.api_key.encode()).decode()},
    }
    kubectl.run(
        [
            "apply",
            "--server-side",
            f"--field-manager={MANAGER}",
            "--force-conflicts",
            "--filename",
            "-",
        ],
        stdin=json.dumps(secret),
    )
    done = kubectl.run(["get", f"secret/{name}", "--output", "json"])
    try:
        annotations = json.loads(done.stdout)["metadata"].get("annotations") or {}
    except (ValueError, KeyError, TypeError, AttributeError) as err:
        raise KubectlFailed(f"`kubectl get secret/{name}` printed no Secret") from err
    if LAST_APPLIED in annotations:
        kubectl.run(["annotate", f"secret/{name}", f"{LAST_APPLIED}-"])


def rollout_status(kubectl: Kubectl, stack: Stack, timeout: float, deployment: str | None = None) -> None:
    """`kubectl rollout status` (of the variant's Deployment unless named) within `timeout`
    seconds; KubectlFailed with kubectl's reason."""
    seconds = max(1, int(timeout))
    done = kubectl.run(
        ["rollout", "status", f"deployment/{deployment or stack.service}", f"--timeout={seconds}s"],
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
    """Probe the variant through the Service (the shared one, else `service`: name and port)
    until it is ready (HealthCheckFailed otherwise), then send `warmup` short completions and
    run `check` with the Service's URL (the same port-forward); `headers` pass the gateway's hold."""
    last = Readiness(False, "health", "not probed yet")
    with (
        service_url(kubectl, stack, *service) if service else service_url(kubectl, stack) as url,
        httpx.Client(
            timeout=httpx.Timeout(10.0, connect=2.0), headers=dict(headers), trust_env=False
        ) as http,
    ):

        def attempt() -> None:
            nonlocal last
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
        _warm_up(http, url, served_name, stack.api_key, warmup)
        if check is not None:
            check(url)


def _warm_up(http: httpx.Client, url: str, served_name: str, api_key: str | None, requests: int) -> None:
    """Short completions before any client reaches the new variant (as `up` does on Docker)."""
    body = {"model": served_name, "prompt": WARMUP_PROMPT, "max_tokens": 16, "temperature": 0}
    auth = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    for _ in range(requests):
        try:
            http.post(f"{url}/v1/completions", json=body, headers=auth, timeout=300.0).raise_for_status()
        except httpx.HTTPError as err:
            raise HealthCheckFailed(f"a warm-up completion failed: {err}") from err


def _log_tail(kubectl: Kubectl, stack: Stack, deployment: str | None = None) -> str:
    """The serving pod's (or the named Deployment's) last log lines, redacted ('' when
    kubectl cannot give them)."""
    try:
        done = kubectl.run(
            ["logs", f"deployment/{deployment or stack.service}", "--tail=40"], timeout=30, check=False
        )
    except KubectlFailed:
        return ""
    return tail(redact(done.stdout, stack.api_key), 40) if done.returncode == 0 else ""


class KubeChange:
    """One change of what serves on the cluster: the stack, kubectl, the options and where
    progress goes."""

    def __init__(self, stack: Stack, kubectl: Kubectl, options: KubeUpOptions, progress: Say, waiting: Say):
        self.stack = stack
        self.kubectl = kubectl
        self.options = options
        self.say = progress
        self.waiting = waiting


class KubeRollout(KubeChange):
    """One switch of the Deployment to a target variant."""

    hold: SwapHold | None = None

    def roll(self, served_name: str) -> None:
        """Wait for the rollout, then gate (and warm up) through the Service, within the timeout."""
        deadline = time.monotonic() + self.options.timeout
        self.say(f"waiting for the rollout (kubectl rollout status, up to {self.options.timeout:.0f}s)")
        rollout_status(self.kubectl, self.stack, self.options.timeout)
        self.say("rolled out; gating through the Service")
        headers = self.hold.headers if self.hold is not None else ()
        warmup = self.stack.gateway.warmup_requests if self.stack.gateway.enabled else 0
        gate(
            self.kubectl,
            self.stack,
            served_name,
            max(deadline, time.monotonic() + 5),
            self.waiting,
            headers,
            warmup,
        )

    def up(self, target: Target) -> KubeUpResult:
        began = time.monotonic()
        before = serving(self.kubectl, self.stack)
        result = KubeUpResult(variant=target.name, outcome="started", previous=before and before.variant)
        overlay = write_overlay(self.stack, target)
        apply_secret(self.kubectl, self.stack)
        same = before is not None and before.config_hash == target.hash
        if target.gateway is not None and not same:
            on_cluster = cluster_gateway_hash(self.kubectl, self.stack)
            if on_cluster is not None:
                self._update_gateway_first(overlay, on_cluster)
                self.hold = kube_hold(self.kubectl, self.stack, self.say)
        applied = finished = False  # apply -k started, finished
        try:
            with handled(interrupt_once):
                try:
                    self._drain(result)
                    self.say(f"applying {target.name} (kubectl apply -k {overlay})")
                    applied = True
                    self.kubectl.run(["apply", "--kustomize", str(overlay)], timeout=120)
                    finished = True
                    self.roll(self.stack.served_model_name)
                except BaseException as err:  # any failure, Ctrl-C included, is undone
                    with interrupts_ignored():
                        result.timings["total"] = time.monotonic() - began
                        if not applied or (not finished and not self._changed(before)):
                            raise SwapFailed(
                                f"{target.name} failed: {_cause(err)}; nothing was changed"
                            ) from err
                        self.rollback(target, before, err)
        finally:
            with interrupts_ignored():
                self._release(result)
        result.outcome = "unchanged" if same else "started"
        if same:
            result.notes.append(f"{target.name} already served with the same configuration")
        result.timings["total"] = time.monotonic() - began
        return result

    def _changed(self, before: Serving | None) -> bool:
        """True when the Deployment no longer runs what it ran before `apply` (a failed apply
        may have changed nothing: undoing then would go back one revision too far)."""
        try:
            now = serving(self.kubectl, self.stack)
        except KubectlFailed:
            return True  # the cluster cannot say: try the undo, which reports its own failure
        return now is not None and (before is None or now.config_hash != before.config_hash)

    def _update_gateway_first(self, overlay: Path, on_cluster: str) -> None:
        """When the gateway itself changes, roll it on its own before the switch (its new pod
        is ready before the old one stops), so the hold is set on the pod that stays."""
        rendered = overlay.parent.parent / "base" / "gateway-deployment.yaml"
        template = yaml.safe_load(rendered.read_text())["spec"]["template"]
        if template["metadata"]["labels"].get(labels.CONFIG_HASH) == on_cluster:
            return
        self.say(
            "the gateway itself changes: rolling it first (its new pod is ready before the old one stops)"
        )
        self.kubectl.run(["apply", "--filename", str(rendered)], timeout=120)
        rollout_status(self.kubectl, self.stack, self.options.timeout, gateway_name(self.stack))

    def _drain(self, result: KubeUpResult) -> None:
        """Hold new requests at the gateway and let the ones in flight finish."""
        if self.hold is None:
            return
        continues = self.stack.gateway.continues(self.options.drain)
        going_on = "; streams go on on the new variant" if continues else ""
        self.say(f"draining the gateway: new requests wait, requests in flight finish{going_on}")
        drained = self.hold.begin(continues)
        result.timings["drain"] = drained.seconds
        result.drained = {
            "finished": drained.drained,
            "cut": drained.cut,
            "continued": drained.continued,
            "refused": drained.refused,
        }
        if drained.cut:
            result.warnings.append(
                f"{drained.cut} request(s) still running after the drain timeout "
                f"({self.stack.gateway.drain_timeout}s) were cut"
            )

    def _release(self, result: KubeUpResult) -> None:
        """The held requests flow to whatever serves now."""
        if self.hold is None:
            return
        began = time.monotonic()
        note = self.hold.end()
        self.hold = None
        result.timings["release"] = time.monotonic() - began
        if note:
            result.notes.append(note)

    def rollback(self, target: Target, before: Serving | None, err: BaseException) -> None:
        """Undo the rollout and gate the previous variant (under the hold); always raises SwapFailed."""
        log = _log_tail(self.kubectl, self.stack)
        found = hints(log)
        message = f"{target.name} failed: {_cause(err)}"
        changed = before is not None and before.config_hash != target.hash
        if not self.options.rollback or not changed or before is None:
            why = "--no-rollback" if not self.options.rollback else "no earlier revision to go back to"
            raise SwapFailed(f"{message}; not rolled back ({why})", log, found) from err
        self.say(f"rolling back to {before.variant} (kubectl rollout undo)")
        try:
            self.kubectl.run(["rollout", "undo", f"deployment/{self.stack.service}"])
            self.roll(before.served_name or self.stack.served_model_name)
        except Exception as again:  # report, never mask the original failure
            raise SwapFailed(
                f"{message}; the rollback to {before.variant} failed too: {again}", log, found
            ) from err
        raise SwapFailed(f"{message}; rolled back to {before.variant}", log, found, rolled_back=True) from err


def _cause(err: BaseException) -> str:
    """An error as one line: interrupted, our own messages as they are, others with their type."""
    if isinstance(err, KeyboardInterrupt):
        return "interrupted"
    return str(err) if isinstance(err, ComposerError) else f"unexpected {type(err).__name__}: {err}"


def up_kubernetes(
    stack: Stack,
    target: Target,
    *,
    kubectl: Kubectl | None = None,
    options: KubeUpOptions | None = None,
    progress: Say = _quiet,
    waiting: Say | None = None,
) -> KubeUpResult:
    """Switch the cluster's Deployment to `target` under the project's swap lock; raise
    SwapFailed (after undoing) on failure, caused by KeyboardInterrupt when interrupted."""
    options = options or KubeUpOptions()
    if not stack.api_key:  # a configuration error never waits for another swap's lock
        raise PreflightFailed(NO_KEY)
    runner = KubeRollout(stack, kubectl or Kubectl.for_stack(stack), options, progress, waiting or progress)
    with swap_lock(stack.project, options.wait_for_lock, progress):
        return runner.up(target)
