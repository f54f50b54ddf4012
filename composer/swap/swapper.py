"""Health-gated swap with rollback: one snapshot, one plan (pure), then execute with Docker.

`up` reads the project once (`snapshot.take`), decides every step and the rollback source
before anything stops (`plan.decide`; `--dry-run` stops here), then runs the steps. A
changed gateway is drained before it is recreated. The running swap's stage is written to
`journal.SwapRecord` (what `status` shows), and every outcome to the history.

Order on one set of GPUs: stop the old container -> wait until its GPU memory is
released -> start the new one with `docker compose` -> gate it (/health, /v1/models,
one 1-token completion). On any failure, Ctrl-C included: collect the log tail and
hints, remove the new container, start the previous one again and gate it too. Only the
first Ctrl-C or SIGTERM counts: later ones are ignored until the rollback has ended, and
`docker compose` runs in its own session, out of reach of the terminal's Ctrl-C. The
error names the original cause first, then what each clean-up step and the rollback did.
"""

from __future__ import annotations

import signal
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING

from composer.doctor import preflight, standby_checks
from composer.engine import bootlog, diagnose, retry
from composer.engine.client import compose
from composer.engine.containers import (
    RunningVariant,
    current_variant,
    our_containers,
    serving_containers,
    sleeping_containers,
    upstream_url,
)
from composer.engine.gate import GateTarget, probe_once, running_target, wait_ready, watch_settled
from composer.engine.retry import Pending
from composer.errors import (
    ComposerError,
    DiagnosedError,
    DownRefused,
    HealthCheckFailed,
    PreflightFailed,
    SwapFailed,
)
from composer.render.prometheus import PROFILE_SERVICES
from composer.render.runfiles import compose_environment, prune_run_files, run_file
from composer.render.spec import API_KEY_VAR, CONTAINER_PORT, resolve
from composer.render.target import Target, resolve_target
from composer.stack.model import Stack
from composer.swap import evidence, snapshot, standby
from composer.swap.gpu_release import ReleaseWait
from composer.swap.holding import SwapHold, start_hold, warm_up
from composer.swap.journal import SwapRecord, append_history
from composer.swap.plan import SwapPlan, decide, plan_swap  # noqa: F401 - plan_swap is public here

if TYPE_CHECKING:
    import docker

    from composer.engine.variant_container import VariantContainer
    from composer.gateway.client import GatewayControl

Say = Callable[[str], None]


def _quiet(_: str) -> None:
    return None


@dataclass(frozen=True)
class UpOptions:
    """How a swap behaves."""

    timeout: float = 900.0
    rollback: bool = True
    wait_for_lock: bool = True
    allow_weak_key: bool = False
    poll_interval: float = 0.1
    release_timeout: float = 60.0
    settle: float = 1.0
    dry_run: bool = False  # print the plan; change nothing (no lock, no Docker change)
    profiles: tuple[str, ...] = ()  # optional services started after the swap (`--with prometheus`)


@dataclass
class UpResult:
    """What a swap did, with timings in seconds."""

    variant: str
    outcome: str
    previous: str | None = None
    timings: dict[str, float] = field(default_factory=dict)
    kv_cache_tokens: int | None = None
    warnings: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    drained: dict[str, int] | None = None  # with a gateway: requests finished and cut
    plan: dict[str, object] | None = None  # the plan that ran (SwapPlan.as_data)
    plan_text: str | None = None  # the plan as text (SwapPlan.describe)


_STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, *((signal.SIGHUP,) if hasattr(signal, "SIGHUP") else ()))
"""Ctrl-C, SIGTERM and SIGHUP (a closed terminal): each rolls a swap back."""


def _stop_signals() -> tuple[int, ...]:
    """The stop signals to handle now: a SIGHUP ignored by `nohup` stays ignored."""
    hangup = getattr(signal, "SIGHUP", None)
    return tuple(s for s in _STOP_SIGNALS if s != hangup or signal.getsignal(s) is not signal.SIG_IGN)


@contextmanager
def _signals(handler: Callable[[int, object], None] | int) -> Iterator[None]:
    """Handle Ctrl-C, SIGTERM and SIGHUP with `handler` inside the block (main thread only)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {sig: signal.signal(sig, handler) for sig in _stop_signals()}
    try:
        yield
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)


def _interrupt_once(signum: int, frame: object) -> None:
    """The first Ctrl-C, SIGTERM or SIGHUP interrupts the swap; the ones after it are ignored.

    Ignoring starts inside the handler, so no second signal can land between the
    interruption and the rollback it starts.
    """
    for sig in _STOP_SIGNALS:
        signal.signal(sig, signal.SIG_IGN)
    raise KeyboardInterrupt


def _interrupts_ignored() -> AbstractContextManager[None]:
    """Let a rollback finish: Ctrl-C, SIGTERM and SIGHUP are ignored while it runs."""
    return _signals(signal.SIG_IGN)


def _reason(err: BaseException) -> str:
    """An error as one line: our own messages as they are, others with their type."""
    if isinstance(err, ComposerError):
        return str(err)
    return f"{type(err).__name__}: {err}"


class Swapper:
    """Executes swap plans for one stack against one Docker engine."""

    def __init__(
        self,
        stack: Stack,
        client: docker.DockerClient,
        options: UpOptions,
        progress: Say = _quiet,
        waiting: Say | None = None,
    ) -> None:
        self.stack = stack
        self.client = client
        self.options = options
        self.say = progress
        self.waiting = waiting or progress
        self.ready_at = 0.0
        self.hold: SwapHold | None = None  # the gateway's hold while a swap runs
        self.parked: str | None = None  # the variant this swap put to sleep
        self.standby_notes: list[str] = []

    # -- checks -------------------------------------------------------------------------
    def preflight(self, target: Target) -> list[str]:
        """The fast subset of doctor's checks; return warnings, raise on the first failure."""
        from composer.doctor.report import fast_checks

        findings = fast_checks(self.stack, target, self.client, allow_weak_key=self.options.allow_weak_key)
        self._raise_failed(findings)
        return [f"{f.detail}: {f.fix}" for f in findings if f.status == "warn"]

    @staticmethod
    def _raise_failed(findings: list[preflight.Finding]) -> None:
        failed = [f for f in findings if f.failed]
        if failed:
            first = failed[0]
            raise PreflightFailed(f"preflight: {first.detail}" + (f"; fix: {first.fix}" if first.fix else ""))

    # -- steps --------------------------------------------------------------------------
    def stop_all(self, sleeping_too: bool = False) -> None:
        """Stop and remove the project's serving variant containers (grace period, then kill).

        Sleeping ones are left alone unless `sleeping_too` (`down` stops them all).
        """
        pick = our_containers if sleeping_too else serving_containers
        for container in pick(self.stack, self.client):
            self.say(f"stopping {container.describe().variant} ({container.name})")
            container.stop_and_remove(self.stack.stop_grace_period)

    def start(self, compose_file: Path, service: str | None = None) -> None:
        """`docker compose up -d` of one service of a run file (never builds, never pulls)."""
        env = compose_environment(compose_file, self.stack.api_key)
        compose(
            self.stack.project,
            compose_file,
            ["up", "--detach", "--no-build", "--pull", "never", service or self.stack.service],
            env=env,
            timeout=max(120.0, self.options.timeout),
        )

    def check_profiles(self, target: Target) -> None:
        """The images of `options.profiles` are local (checked before anything changes)."""
        from docker.errors import ImageNotFound

        if "prometheus" in self.options.profiles and target.prometheus is not None:
            image = resolve(target.prometheus.image)
            try:
                self.client.images.get(image)
            except ImageNotFound:
                raise PreflightFailed(
                    f"preflight: the prometheus image {image} is not here; fix: make image-prometheus "
                    "(or set [gateway] prometheus_image)"
                ) from None

    def start_profiles(self, target: Target, result: UpResult) -> None:
        """Start the optional services of `options.profiles` (once the variant serves)."""
        for profile in self.options.profiles:
            service = PROFILE_SERVICES[profile]
            self.say(f"starting {service} (the {profile} profile)")
            self.start(run_file(target), service)
            result.notes.append(f"{service} runs (the {profile} profile)")

    def hold_clients(
        self, target: Target, compose_file: Path, result: UpResult, recreate_gateway: bool = False
    ) -> None:
        """With a gateway: make sure it runs, then drain it (clients wait from now on).

        `recreate_gateway` (its settings or image changed): drain the running gateway first,
        so requests in flight finish, then recreate it; requests held by the old gateway
        at that moment are cut, and counted.
        """
        if target.gateway is None:
            return
        if recreate_gateway:
            self._recreate_gateway(compose_file, target, result)
        else:
            self.start(compose_file, target.gateway.service)
        self.hold = start_hold(
            self.stack, self.client, self.stack.gateway.drain_timeout, self.say, target=target.name
        )
        self.say("draining the gateway: new requests wait, requests in flight finish")
        drained = self.hold.begin()
        result.timings["drain"] = result.timings.get("drain", 0.0) + drained.seconds
        before = result.drained or {"finished": 0, "cut": 0}
        result.drained = {
            "finished": before["finished"] + drained.drained,
            "cut": before["cut"] + drained.cut,
        }
        if drained.cut:
            result.warnings.append(
                f"{drained.cut} request(s) still running after the drain timeout "
                f"({self.stack.gateway.drain_timeout}s) were cut"
            )

    def _recreate_gateway(self, compose_file: Path, target: Target, result: UpResult) -> None:
        """Drain the old gateway, then recreate it with the new settings (held requests cut)."""
        assert target.gateway is not None
        old = start_hold(self.stack, self.client, self.stack.gateway.drain_timeout, self.say)
        self.say("the gateway's settings changed: draining it before it is recreated")
        drained = old.begin()
        try:
            held = old.control.state().held
        except Exception:  # the old gateway's count is gone with it: unknown, not zero
            held = 0
        old._stop.set()
        began = time.monotonic()
        self.start(compose_file, target.gateway.service)
        result.timings["gateway_recreate"] = time.monotonic() - began
        result.timings["drain"] = drained.seconds
        cut = drained.cut + held
        result.drained = {"finished": drained.drained, "cut": cut}
        result.notes.append(
            f"the gateway was recreated with its new settings after a drain: {drained.drained} request(s) "
            f"finished first, {cut} cut"
        )
        if cut:
            result.warnings.append(
                f"{cut} request(s) were cut by the gateway's recreation ({drained.cut} still running after "
                f"the drain timeout, {held} waiting in the old gateway): clients retry them"
            )

    def gateway_differs(self, compose_file: Path, snap: snapshot.Snapshot) -> bool:
        """True when the running gateway's settings or image differ from the run file's."""
        gateway = snap.gateway
        if gateway is None or not snap.gateway_running or not self.stack.gateway.enabled:
            return False
        labels = gateway.labels or {}
        same = self._same_gateway_file(compose_file, labels.get("com.docker.compose.project.config_files"))
        if same and self._gateway_key_matches(gateway):
            return self._gateway_image_differs(gateway)
        env = compose_environment(compose_file, self.stack.api_key)
        try:
            done = compose(
                self.stack.project, compose_file, ["config", "--hash", "gateway"], env=env, timeout=60
            )
        except ComposerError:
            return False  # unknown: leave it to `docker compose up` as before
        words = done.stdout.split()
        wanted = words[-1] if words else ""
        if wanted and labels.get("com.docker.compose.config-hash") not in (None, wanted):
            return True
        return self._gateway_image_differs(gateway)

    def _gateway_image_differs(self, gateway: object) -> bool:
        attrs = gateway.attrs  # type: ignore[attr-defined]
        image = attrs.get("Config", {}).get("Image", "")
        try:
            return bool(image) and self.client.images.get(image).id != attrs.get("Image")
        except Exception:  # the image is gone or Docker does not answer: compose decides
            return False

    @staticmethod
    def _same_gateway_file(compose_file: Path, created_from: str | None) -> bool:
        """The gateway's service in the run file equals the one in the file that created it
        (run files resolve every value but the API key: no `docker compose config` needed)."""
        import yaml

        if not created_from:
            return False
        created = Path(created_from.split(",")[0])
        if created.resolve() == Path(compose_file).resolve():
            return False  # rewritten for this up (same variant hash): compose's hash decides
        try:
            old, new = (
                yaml.safe_load(Path(f).read_text(encoding="utf-8"))["services"]["gateway"]
                for f in (created_from.split(",")[0], compose_file)
            )
        except (OSError, KeyError, TypeError, yaml.YAMLError):
            return False
        return bool(old == new)

    def _gateway_key_matches(self, gateway: object) -> bool:
        env = gateway.attrs.get("Config", {}).get("Env") or []  # type: ignore[attr-defined]
        return f"{API_KEY_VAR}={self.stack.api_key or ''}" in env

    def release_clients(
        self, result: UpResult, done: bool = False, failure: SwapFailed | None = None
    ) -> None:
        """The held requests flow to whatever serves now (the gateway is told what that is:
        the target when `done`, the previous variant after a rollback)."""
        if self.hold is None:
            return
        began = time.monotonic()
        if done:
            note = self.hold.end(result.variant, ok=True, detail=result.outcome)
        elif failure is not None:
            serving = result.previous if failure.rolled_back else None
            note = self.hold.end(serving, ok=False, detail=str(failure).splitlines()[0])
        else:
            note = self.hold.end()
        self.hold = None
        result.timings["release"] = time.monotonic() - began
        if note:
            result.notes.append(note)

    def _past_the_hold(self, target: GateTarget) -> GateTarget:
        """The gate's target, carrying the hold's probe token when the gateway holds clients."""
        return replace(target, headers=self.hold.headers) if self.hold is not None else target

    def gate(
        self,
        target: GateTarget,
        started: float,
        container: VariantContainer | None = None,
        during_settle: Callable[[], None] | None = None,
    ) -> str:
        """Wait until the variant's container (by default the newest serving one) is ready; return its log.

        `during_settle` (the warm-up) runs while the settle watch runs, not after it: both
        wait on the same engine, and clients are released only when both are over.
        """
        containers = [container] if container is not None else serving_containers(self.stack, self.client)
        if not containers:
            raise HealthCheckFailed("the container was not created")
        log = wait_ready(
            containers[0],
            target,
            deadline=started + self.options.timeout,
            interval=self.options.poll_interval,
            waiting=self.waiting,
        )
        self.ready_at = time.monotonic()
        self.say(f"{target.variant} is ready ({self.ready_at - started:.1f}s); watching it settle")
        failed: list[BaseException] = []

        def beside() -> None:
            try:
                during_settle()  # type: ignore[misc]
            except Exception as err:  # reported after the settle watch, which fails first if it fails
                failed.append(err)

        thread = threading.Thread(target=beside, name="warm-up", daemon=True) if during_settle else None
        if thread is not None:
            thread.start()
        try:
            watch_settled(containers[0], target, self.options.settle, self.options.poll_interval)
        finally:
            if thread is not None:
                thread.join()
        if failed:
            raise failed[0]
        return log

    # -- the swap -----------------------------------------------------------------------
    def up(self, target: Target, dry_run: bool = False) -> UpResult:
        """Swap `target` in; raise SwapFailed (after rolling back) when it fails.

        One snapshot is read, one plan decided from it before anything stops; `dry_run`
        returns the plan (in `result.plan`) and changes nothing.
        """
        total_start = time.monotonic()
        variant, target_hash = target.name, target.hash
        result = UpResult(variant=variant, outcome="started")
        result.warnings += self.preflight(target)
        snap = snapshot.take(self.stack, self.client)
        current = snap.current
        same = current is not None and current.variant == variant and current.config_hash == target_hash
        compose_file = run_file(target)
        recovered = same and target.gateway is not None and not snap.gateway_running and not dry_run
        if recovered:
            # the gateway was killed or removed: start only it, never reload a healthy variant
            self.say("the gateway is not running: starting it")
            self.start(compose_file, target.gateway.service)
            snap = snapshot.take(self.stack, self.client)
            current = snap.current
        ready = same and current is not None and self._is_ready(current, settle_s=10.0 if recovered else 0.0)
        plan = decide(
            snap,
            variant,
            target_hash,
            target_sleeps=target.variant.standby == "sleep",
            sleeps_in_stack={name: v.standby == "sleep" for name, v in self.stack.variants.items()},
            current_ready=ready,
            gateway_update=self.gateway_differs(compose_file, snap),
        )
        result.previous = current.variant if current else None
        if plan.steps:
            asleep = [m.variant for m in snap.asleep if m.info.name not in plan.stop_first]
            plan = self._check_standby_fits(target, plan, result, asleep)
        result.plan = plan.as_data()
        result.plan_text = plan.describe()
        result.notes += list(plan.notes)
        if dry_run:
            result.outcome = "unchanged" if plan.no_op else "planned"
            return result
        if plan.no_op:
            result.outcome = "unchanged"
            result.notes.append(f"{variant} already serves with the same configuration")
            result.timings["total"] = time.monotonic() - total_start
            return result
        if not plan.steps:  # only the gateway's settings changed
            result.outcome = "gateway updated"
            updated = False
            try:
                self.hold_clients(target, compose_file, result, recreate_gateway=True)
                self._route(target)  # the new gateway forwards to the serving container at once
                self._tell_serving(variant)
                updated = True
            finally:
                self.release_clients(result, updated)
            result.timings["total"] = time.monotonic() - total_start
            self._history(plan, result.outcome, result)
            return result
        if current is not None and "stop" in plan.steps and self.options.rollback:
            self._raise_failed([preflight.check_rollback_image(self.client, current.variant, current.image)])
        previous_file = current.config_file if current else None
        prune_run_files(self.stack.project, variant, keep=(compose_file, previous_file))
        failure: SwapFailed | None = None
        done = False
        record = SwapRecord(self.stack.project, result.previous, variant, self.options.timeout)
        record.stage("draining")
        try:
            # nothing has changed if this fails
            self.hold_clients(target, compose_file, result, recreate_gateway=plan.gateway_update)
            with _signals(_interrupt_once):
                try:
                    self._execute(plan, target, compose_file, result, snap=snap, record=record)
                    if plan.gateway_update:
                        self._tell_serving(variant)
                except BaseException as err:  # any failure, Ctrl-C included, rolls back
                    with _interrupts_ignored():
                        record.stage("rolling back")
                        failure = self._fail(plan, err, compose_file)
                        failure.tail_shown = True  # evidence.keep printed it before the rollback
                        self._history(
                            plan, "rolled back" if failure.rolled_back else "failed", result, str(failure)
                        )
                        raise failure from err
            result.outcome = (
                "woke"
                if "wake" in plan.steps
                else "routed"
                if plan.steps[0] == "route"
                else "swapped"
                if current
                else "started"
            )
            done = True
        finally:
            with _interrupts_ignored():
                self.release_clients(result, done, failure)
                record.close()
        result.timings["total"] = time.monotonic() - total_start
        self._history(plan, result.outcome, result)
        return result

    def _tell_serving(self, variant: str) -> None:
        """A recreated gateway with switching settings learns which variant serves (aliases of
        it are answered at once, not raised as a demand)."""
        if self.hold is not None and self.stack.gateway.switches:
            try:
                self.hold.control.report_serving(variant)
            except ComposerError as err:
                self.say(f"the gateway was not told that {variant} serves: {err}")

    def _history(self, plan: SwapPlan, outcome: str, result: UpResult, cause: str | None = None) -> None:
        append_history(
            self.stack.project,
            {
                "kind": "up",
                "source": plan.previous.variant if plan.previous else None,
                "target": plan.target,
                "outcome": outcome,
                "steps": list(plan.steps),
                "timings": {k: round(v, 3) for k, v in result.timings.items()},
                "drained": result.drained,
                "cause": cause.splitlines()[0][:500] if cause else None,
            },
        )

    def _sleeps(self, variant: str) -> bool:
        return variant in self.stack.variants and self.stack.variants[variant].standby == "sleep"

    def _target_sleeper(self, target: Target) -> VariantContainer | None:
        """The target's sleeping container when it can be woken; a stale one is removed."""
        sleeper = standby.sleeper_of(self.stack, self.client, target.name)
        if sleeper is None:
            return None
        if sleeper.describe().config_hash == target.hash and target.variant.standby == "sleep":
            return sleeper
        self.say(f"removing {target.name}'s sleeping container: its configuration changed")
        sleeper.stop_and_remove(self.stack.stop_grace_period)
        return None

    def _check_standby_fits(
        self, target: Target, plan: SwapPlan, result: UpResult, sleeping: list[str] | None = None
    ) -> SwapPlan:
        """The memory planner, before anything stops: refuse with the numbers.

        When putting the serving variant to sleep does not fit and the stack says
        `standby_fallback = "stop"`, it is stopped instead (and the result says so).
        """
        if sleeping is None:
            sleeping = [c.describe().variant for c in sleeping_containers(self.stack, self.client)]
        asleep = set(sleeping)
        asleep.discard(target.name)
        sleeping_now = sorted(asleep)
        if "sleep" in plan.steps and plan.previous is not None:
            asleep.add(plan.previous.variant)
        fit = standby_checks.plan_for(self.stack, target, sorted(asleep))
        if not fit.fits and "sleep" in plan.steps and self.stack.standby_fallback == "stop":
            without = standby_checks.plan_for(self.stack, target, sleeping_now)
            if without.fits:
                stopped = plan.previous.variant if plan.previous else "the serving variant"
                fallback = (
                    f'{stopped} is stopped instead of put to sleep (stack.standby_fallback = "stop"): '
                    "sleep standby does not fit: " + "; ".join(fit.problems)
                )
                self.say(fallback)
                result.warnings.append(fallback)
                steps = ("stop", "release", *(s for s in plan.steps if s != "sleep"))
                self.standby_notes = without.costs + without.notes
                rollback = plan.rollback
                if rollback is not None and plan.previous is not None:
                    previous = plan.previous
                    rollback = replace(
                        rollback, how="start", config_file=previous.config_file, service=previous.service
                    )
                return replace(plan, steps=steps, rollback=rollback)
            fit = without if not without.fits else fit
        if not fit.fits:
            raise standby_checks.refusal(fit)
        self.standby_notes = fit.costs + fit.notes
        return plan

    def _control(self) -> GatewayControl:
        if self.hold is None:
            raise SwapFailed("sleep standby needs the gateway's control channel, which is not held")
        return self.hold.control

    def _route(self, target: Target) -> None:
        """Point the gateway at the container that will serve (by name, or the shared name)."""
        if self.hold is None:
            return
        if target.variant.standby == "sleep":
            self.hold.control.route(upstream_url(target.spec.container_name))
        else:
            self.hold.control.route(f"http://{self.stack.service}:{CONTAINER_PORT}")

    def _named(self, name: str) -> VariantContainer | None:
        """The container compose just created, by its name (no listing)."""
        from docker.errors import NotFound

        from composer.engine.variant_container import VariantContainer

        try:
            return VariantContainer(self.client.containers.get(name))
        except NotFound:
            return None

    def _stop_serving(self, snap: snapshot.Snapshot, plan: SwapPlan) -> None:
        """Stop what the snapshot saw serving (and exited containers of the shared service)."""
        for member in snap.members:
            if member.asleep or member.info.name in plan.stop_first:
                continue
            if member.serving or not member.running:
                self.say(f"stopping {member.variant} ({member.info.name})")
                member.container.stop_and_remove(self.stack.stop_grace_period)

    def _is_ready(self, current: RunningVariant, settle_s: float = 0.0) -> bool:
        """One probe; with `settle_s`, probes until then (a gateway that just started)."""

        def attempt() -> bool:
            if probe_once(running_target(self.stack, current)):
                return True
            raise Pending(f"{current.variant} not ready yet", result=False)

        return bool(retry.settle_ready(settle_s)(attempt))

    def _execute(
        self,
        plan: SwapPlan,
        target: Target,
        compose_file: Path,
        result: UpResult,
        *,
        snap: snapshot.Snapshot | None = None,
        record: SwapRecord | None = None,
    ) -> None:
        stage = record.stage if record is not None else _quiet
        members = {m.info.name: m for m in snap.members} if snap is not None else {}
        for name in plan.stop_first:
            self.say(f"stopping {members[name].variant} ({name})")
            members[name].container.stop_and_remove(self.stack.stop_grace_period)
        release = None
        if "release" in plan.steps:  # the snapshot the release wait compares with, before the stop
            release = ReleaseWait.before_stop(self.stack, target.variant, plan.previous)
        if "sleep" in plan.steps and plan.previous is not None:
            stage("putting the serving variant to sleep")
            began = time.monotonic()
            self.say(f"putting {plan.previous.variant} to sleep (level {self.stack.sleep_level})")
            serving = members[plan.previous.name].container
            standby.put_to_sleep(self._control(), serving, plan.previous.variant, self.stack)
            self.parked = plan.previous.variant
            standby.park(serving)
            result.timings["sleep"] = time.monotonic() - began
        if "stop" in plan.steps:
            stage("stopping")
            began = time.monotonic()
            if snap is None:
                self.stop_all()
            else:
                self._stop_serving(snap, plan)
            result.timings["stop"] = time.monotonic() - began
        if release is not None:
            stage("waiting for GPU memory")
            began = time.monotonic()
            note = release.wait(self.options.release_timeout, self.waiting).note
            result.timings["release_wait"] = time.monotonic() - began
            if note:
                result.notes.append(note)
        began = time.monotonic()
        watched: VariantContainer | None = None
        if "wake" in plan.steps:
            stage("waking")
            self.say(f"waking {plan.target}")
            sleeper = snap.sleeper_of(plan.target) if snap is not None else None
            watched = (
                sleeper.container if sleeper else standby.sleeper_of(self.stack, self.client, plan.target)
            )
            if watched is None:
                raise HealthCheckFailed(f"{plan.target}'s sleeping container is gone")
            standby.wake(self._control(), watched, plan.target, self.stack)
            standby.unpark(watched, self.stack.restart)
        elif "adopt" in plan.steps and snap is not None:
            stage("routing")
            awake = next(m for m in snap.awake_idle if m.variant == plan.target)
            watched = awake.container
            self.say(f"{plan.target} runs awake ({watched.name}): routing to it")
            self._control().route(standby.upstream_of(watched))
            standby.unpark(watched, self.stack.restart)
        elif "route" in plan.steps:
            stage("routing")
            self.say(f"routing the gateway to {plan.target}")
            self._route(target)
        else:
            stage("loading")
            self.say(f"starting {plan.target}")
            if target.variant.standby == "sleep":
                self.start(compose_file, target.spec.compose_service)
            else:
                self.start(compose_file)
            self._route(target)
            watched = self._named(target.spec.container_name) if snap is not None else None
        stage("gating")
        gate_target = self._past_the_hold(
            GateTarget(
                plan.target,
                self.stack.port,
                self.stack.bind_address,
                self.stack.served_model_name,
                self.stack.api_key,
            )
        )
        warmed: list[float] = []
        warm = None
        if self.hold is not None and self.stack.gateway.warmup_requests:

            def warm() -> None:
                warmed.extend(warm_up(gate_target, self.stack.gateway.warmup_requests))

        log = self.gate(gate_target, began, watched, warm)
        stage("settling")
        if "wake" in plan.steps:
            result.timings["wake"] = self.ready_at - began  # wake_up until the gate passed
            standby.check_awake(self._control(), plan.target)
            if target.variant.speculative is not None:
                checked = time.monotonic()
                rate = standby.check_acceptance(
                    self._control(), gate_target, plan.target, self.stack.acceptance_floor
                )
                result.notes.append(f"acceptance after the wake: {rate:.2f}")
                result.timings["acceptance_check"] = time.monotonic() - checked
        result.notes += self.standby_notes
        result.timings["start_to_ready"] = self.ready_at - began
        result.timings["settle"] = time.monotonic() - self.ready_at
        if warmed:  # it ran during the settle watch
            result.timings["warmup"] = sum(warmed)
            result.notes.append(
                "warm-up before clients (during the settle watch): "
                + ", ".join(f"{t:.2f}s" for t in warmed)
                + " per request"
            )
        result.kv_cache_tokens = bootlog.kv_cache_tokens(log)
        expected = target.variant.min_kv_cache_tokens
        if expected and result.kv_cache_tokens is not None and result.kv_cache_tokens < expected:
            result.warnings.append(
                f"KV cache holds {result.kv_cache_tokens:,} tokens, below the expected {expected:,}: "
                "GPU memory may still be held by another process"
            )

    def _fail(self, plan: SwapPlan, err: BaseException, compose_file: Path) -> SwapFailed:
        """Clean up after a failed start and roll back; the message gives the cause first.

        Nothing here may hide the original failure: each step that fails (Docker gone,
        a container that will not stop) is reported after it, with what the rollback did.
        """
        if isinstance(err, KeyboardInterrupt):
            cause = "interrupted"
        elif isinstance(err, ComposerError):
            cause = str(err)
        else:
            cause = f"unexpected {_reason(err)}"
        diagnosed = err if isinstance(err, DiagnosedError) else None
        log_tail = bootlog.redact((diagnosed and diagnosed.log_tail) or self._log_tail(), self.stack.api_key)
        hints = (diagnosed and diagnosed.hints) or diagnose.hints(log_tail)
        evidence.keep(self.stack, self.client, plan.target, cause, log_tail, self.say)
        message = f"{plan.target} failed: {cause}"
        removed = True
        try:
            self.stop_all()
            self._remove_variant(plan.target)
        except Exception as stop_err:  # Docker itself may be gone: say so after the cause
            removed = False
            message += f"; could not remove it: {_reason(stop_err)}"
        previous = plan.previous
        if previous is None:
            left = self._clean_up(compose_file) if removed else "no variant was running before"
            return SwapFailed(f"{message}; {left}", log_tail, hints, rolled_back=False)
        if not self.options.rollback:
            left = "rollback disabled: nothing is running" if removed else "rollback disabled"
            return SwapFailed(f"{message}; {left}", log_tail, hints)
        try:
            self._restore(previous, plan)
        except BaseException as rollback_err:  # report, never mask the original failure
            return SwapFailed(
                f"{message}; rollback to {previous.variant} failed too: {_reason(rollback_err)}",
                log_tail,
                hints,
                rolled_back=False,
            )
        return SwapFailed(
            f"{message}; rolled back to {previous.variant}, which serves again",
            log_tail,
            hints,
            rolled_back=True,
        )

    def _remove_variant(self, variant: str) -> None:
        """Remove the failed variant's containers, a sleeping one included."""
        for container in our_containers(self.stack, self.client):
            if container.describe().variant == variant:
                container.stop_and_remove(self.stack.stop_grace_period)

    def _clean_up(self, compose_file: Path) -> str:
        """After a failed first start, remove what it created (the project's network)."""
        try:
            env = compose_environment(compose_file, self.stack.api_key)
            compose(self.stack.project, compose_file, ["down"], env=env, timeout=120)
        except Exception as err:
            return f"nothing is running; could not remove the project's network: {_reason(err)}"
        return "nothing is running"

    def _restore(self, previous: RunningVariant, plan: SwapPlan | None = None) -> None:
        """Bring the previous variant back from where the plan says: its sleeping container,
        or exactly the run file and compose service that created its container."""
        self.say(f"rolling back to {previous.variant}")
        if self.parked == previous.variant:  # it was put to sleep: wake it again
            sleeper = standby.sleeper_of(self.stack, self.client, previous.variant)
            if sleeper is not None:
                began = time.monotonic()
                standby.wake(self._control(), sleeper, previous.variant, self.stack)
                standby.unpark(sleeper, self.stack.restart)
                self.gate(self._past_the_hold(running_target(self.stack, previous)), began, sleeper)
                standby.check_awake(self._control(), previous.variant)
                return
        rollback = plan.rollback if plan is not None else None
        recorded = (rollback.config_file if rollback else None) or previous.config_file
        compose_file = Path(recorded) if recorded else None
        service = (rollback.service if rollback else None) or previous.service
        if compose_file is None or not compose_file.is_file():
            previous_target = resolve_target(self.stack, previous.variant)
            compose_file = run_file(previous_target)
            service = previous_target.spec.compose_service
        began = time.monotonic()
        self.start(compose_file, service or self.stack.service)
        if self.hold is not None:
            standby_service = service not in (None, self.stack.service)
            self.hold.control.route(
                upstream_url(previous.name)
                if standby_service
                else f"http://{self.stack.service}:{CONTAINER_PORT}"
            )
        self.gate(self._past_the_hold(running_target(self.stack, previous)), began)

    def _log_tail(self) -> str:
        try:
            containers = our_containers(self.stack, self.client)
        except Exception:  # Docker gone: the failure itself is reported, without a log
            return ""
        if not containers:
            return ""
        return bootlog.tail(containers[0].log(tail=60), 40)

    def down(self) -> str | None:
        """Stop and remove whatever variant runs; return its name."""
        current = current_variant(self.stack, self.client)
        self.stop_all(sleeping_too=True)
        compose(self.stack.project, None, ["down", "--remove-orphans"], timeout=120)
        return current.variant if current else None

    def down_variant(self, variant: str, force: bool = False) -> str:
        """Stop and remove one variant's container, asleep or serving; say what was done.

        Stopping the serving variant while others sleep would leave nothing serving
        (clients held, then 503): refused unless `force`. When it is the only variant
        running, this is `down` (the whole project, gateway included).
        """
        ours = our_containers(self.stack, self.client)
        mine = [c for c in ours if c.describe().variant == variant]
        if not mine:
            return f"{variant} is not running; nothing stopped"
        asleep = {c.name for c in sleeping_containers(self.stack, self.client)}
        others = sorted({c.describe().variant for c in ours if c.describe().variant != variant})
        sleeping_others = sorted({c.describe().variant for c in ours if c.name in asleep} - {variant})
        if all(c.name in asleep for c in mine):
            for container in mine:
                self.say(f"stopping {variant} ({container.name}, asleep)")
                container.stop_and_remove(self.stack.stop_grace_period)
            return f"stopped {variant} (it was asleep: its GPU residue and host RAM are free)"
        if not others:
            self.down()
            return f"stopped {variant} (the only variant running: the whole project is down)"
        if not force:
            left = sleeping_others or others
            raise DownRefused(
                f"{variant} serves: stopping it leaves nothing serving while {', '.join(left)} sleep "
                f"(clients would be held, then answered 503); `compose-spec up {left[0]}` switches, "
                f"`compose-spec down` stops everything, `compose-spec down {variant} --force` "
                f"stops only {variant}"
            )
        for container in mine:
            self.say(f"stopping {variant} ({container.name})")
            container.stop_and_remove(self.stack.stop_grace_period)
        left = ", ".join(others)
        return f"stopped {variant}; nothing serves now ({left} left): `compose-spec up VARIANT` serves one"


def up(
    stack: Stack,
    target: Target,
    *,
    client: docker.DockerClient,
    options: UpOptions | None = None,
    progress: Say = _quiet,
    waiting: Say | None = None,
) -> UpResult:
    """Swap `target` in under the project's lock (see Swapper.up)."""
    from composer.swap.lock import swap_lock

    options = options or UpOptions()
    swapper = Swapper(stack, client, options, progress, waiting)
    if options.dry_run:  # reads only: no lock, nothing started, stopped or routed
        return swapper.up(target, dry_run=True)
    swapper.check_profiles(target)
    with swap_lock(stack.project, options.wait_for_lock, progress):
        result = swapper.up(target)
        swapper.start_profiles(target, result)
        return result


def down(stack: Stack, *, client: docker.DockerClient, progress: Say = _quiet) -> str | None:
    """Stop and remove the running variant under the project's lock."""
    from composer.swap.lock import swap_lock

    with swap_lock(stack.project, True, progress):
        stopped = Swapper(stack, client, UpOptions(), progress).down()
    append_history(stack.project, {"kind": "down", "source": stopped, "target": None, "outcome": "stopped"})
    return stopped


def down_variant(
    stack: Stack, variant: str, *, client: docker.DockerClient, force: bool = False, progress: Say = _quiet
) -> str:
    """Stop one variant's container under the project's lock (see Swapper.down_variant)."""
    from composer.swap.lock import swap_lock

    with swap_lock(stack.project, True, progress):
        said = Swapper(stack, client, UpOptions(), progress).down_variant(variant, force)
    append_history(stack.project, {"kind": "down", "source": variant, "target": None, "outcome": said})
    return said
