"""Health-gated swap with rollback: plan (pure), then execute with Docker.

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
from composer.engine import bootlog, diagnose
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
from composer.errors import (
    ComposerError,
    DiagnosedError,
    DownRefused,
    HealthCheckFailed,
    PreflightFailed,
    SwapFailed,
)
from composer.render.runfiles import compose_environment, prune_run_files, run_file
from composer.render.spec import CONTAINER_PORT
from composer.render.target import Target, resolve_target
from composer.stack.model import Stack
from composer.swap import evidence, standby
from composer.swap.gpu_release import ReleaseWait
from composer.swap.holding import SwapHold, start_hold, warm_up

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


@dataclass(frozen=True)
class SwapPlan:
    """The steps a swap will take; empty when the target already serves."""

    target: str
    target_hash: str
    previous: RunningVariant | None
    steps: tuple[str, ...]


def plan_swap(
    target: str,
    target_hash: str,
    current: RunningVariant | None,
    current_ready: bool,
    *,
    current_sleeps: bool = False,
    target_asleep: bool = False,
) -> SwapPlan:
    """Decide the steps from what runs now (pure).

    `current_sleeps`: the serving variant has sleep standby (it is put to sleep, not
    stopped); `target_asleep`: the target sleeps with the same configuration (woken, not
    started).
    """
    if current and current.variant == target and current.config_hash == target_hash and current_ready:
        return SwapPlan(target, target_hash, current, ())
    steps: tuple[str, ...] = ()
    if current:
        steps = ("sleep",) if current_sleeps and current.variant != target else ("stop", "release")
    steps += ("wake", "gate") if target_asleep else ("start", "gate")
    return SwapPlan(target, target_hash, current, steps)


_STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)


@contextmanager
def _signals(handler: Callable[[int, object], None] | int) -> Iterator[None]:
    """Handle Ctrl-C and SIGTERM with `handler` inside the block (main thread only)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {sig: signal.signal(sig, handler) for sig in _STOP_SIGNALS}
    try:
        yield
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)


def _interrupt_once(signum: int, frame: object) -> None:
    """The first Ctrl-C or SIGTERM interrupts the swap; the ones after it are ignored.

    Ignoring starts inside the handler, so no second signal can land between the
    interruption and the rollback it starts.
    """
    for sig in _STOP_SIGNALS:
        signal.signal(sig, signal.SIG_IGN)
    raise KeyboardInterrupt


def _interrupts_ignored() -> AbstractContextManager[None]:
    """Let a rollback finish: Ctrl-C and SIGTERM are ignored while it runs."""
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

    def hold_clients(self, target: Target, compose_file: Path, result: UpResult) -> None:
        """With a gateway: make sure it runs, then drain it (clients wait from now on)."""
        if target.gateway is None:
            return
        self.start(compose_file, target.gateway.service)
        self.hold = start_hold(
            self.stack, self.client, self.stack.gateway.drain_timeout, self.say, target=target.name
        )
        self.say("draining the gateway: new requests wait, requests in flight finish")
        drained = self.hold.begin()
        result.timings["drain"] = drained.seconds
        result.drained = {"finished": drained.drained, "cut": drained.cut}
        if drained.cut:
            result.warnings.append(
                f"{drained.cut} request(s) still running after the drain timeout "
                f"({self.stack.gateway.drain_timeout}s) were cut"
            )

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

    def gate(self, target: GateTarget, started: float) -> str:
        """Wait until the newest serving variant container is ready; return its log."""
        containers = serving_containers(self.stack, self.client)
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
        watch_settled(containers[0], target, self.options.settle, self.options.poll_interval)
        return log

    # -- the swap -----------------------------------------------------------------------
    def up(self, target: Target) -> UpResult:
        """Swap `target` in; raise SwapFailed (after rolling back) when it fails."""
        total_start = time.monotonic()
        variant, target_hash = target.name, target.hash
        result = UpResult(variant=variant, outcome="started")
        result.warnings += self.preflight(target)
        current = current_variant(self.stack, self.client)
        same = current is not None and current.variant == variant and current.config_hash == target_hash
        ready = same and self._is_ready(current)  # probing matters only for a possible no-op
        sleeper = self._target_sleeper(target)
        current_sleeps = current is not None and self._sleeps(current.variant)
        plan = plan_swap(
            variant,
            target_hash,
            current,
            ready,
            current_sleeps=current_sleeps,
            target_asleep=sleeper is not None,
        )
        result.previous = current.variant if current else None
        if not plan.steps:
            result.outcome = "unchanged"
            result.notes.append(f"{variant} already serves with the same configuration")
            result.timings["total"] = time.monotonic() - total_start
            return result
        if plan.steps:
            plan = self._check_standby_fits(target, plan, result)
        if current is not None and "stop" in plan.steps and self.options.rollback:
            self._raise_failed([preflight.check_rollback_image(self.client, current.variant, current.image)])
        compose_file = run_file(target)
        previous_file = current.config_file if current else None
        prune_run_files(self.stack.project, variant, keep=(compose_file, previous_file))
        failure: SwapFailed | None = None
        done = False
        try:
            self.hold_clients(target, compose_file, result)  # nothing has changed if this fails
            with _signals(_interrupt_once):
                try:
                    self._execute(plan, target, compose_file, result)
                except BaseException as err:  # any failure, Ctrl-C included, rolls back
                    with _interrupts_ignored():
                        failure = self._fail(plan, err, compose_file)
                        failure.tail_shown = True  # evidence.keep printed it before the rollback
                        raise failure from err
            result.outcome = "woke" if "wake" in plan.steps else "swapped" if current else "started"
            done = True
        finally:
            with _interrupts_ignored():
                self.release_clients(result, done, failure)
        result.timings["total"] = time.monotonic() - total_start
        return result

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

    def _check_standby_fits(self, target: Target, plan: SwapPlan, result: UpResult) -> SwapPlan:
        """The memory planner, before anything stops: refuse with the numbers.

        When putting the serving variant to sleep does not fit and the stack says
        `standby_fallback = "stop"`, it is stopped instead (and the result says so).
        """
        asleep = {c.describe().variant for c in sleeping_containers(self.stack, self.client)}
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
                return replace(plan, steps=steps)
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

    def _is_ready(self, current: RunningVariant) -> bool:
        return probe_once(running_target(self.stack, current))

    def _execute(self, plan: SwapPlan, target: Target, compose_file: Path, result: UpResult) -> None:
        release = None
        if "release" in plan.steps:  # the snapshot the release wait compares with, before the stop
            release = ReleaseWait.before_stop(self.stack, target.variant, plan.previous)
        if "sleep" in plan.steps and plan.previous is not None:
            began = time.monotonic()
            self.say(f"putting {plan.previous.variant} to sleep (level {self.stack.sleep_level})")
            serving = serving_containers(self.stack, self.client)
            standby.put_to_sleep(self._control(), serving[0], plan.previous.variant, self.stack)
            self.parked = plan.previous.variant
            result.timings["sleep"] = time.monotonic() - began
        if "stop" in plan.steps:
            began = time.monotonic()
            self.stop_all()
            result.timings["stop"] = time.monotonic() - began
        if release is not None:
            began = time.monotonic()
            note = release.wait(self.options.release_timeout, self.waiting).note
            result.timings["release_wait"] = time.monotonic() - began
            if note:
                result.notes.append(note)
        began = time.monotonic()
        if "wake" in plan.steps:
            self.say(f"waking {plan.target}")
            sleeper = standby.sleeper_of(self.stack, self.client, plan.target)
            if sleeper is None:
                raise HealthCheckFailed(f"{plan.target}'s sleeping container is gone")
            standby.wake(self._control(), sleeper, plan.target, self.stack)
        else:
            self.say(f"starting {plan.target}")
            if target.variant.standby == "sleep":
                self.start(compose_file, target.spec.compose_service)
            else:
                self.start(compose_file)
            self._route(target)
        gate_target = self._past_the_hold(
            GateTarget(
                plan.target,
                self.stack.port,
                self.stack.bind_address,
                self.stack.served_model_name,
                self.stack.api_key,
            )
        )
        log = self.gate(gate_target, began)
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
        if self.hold is not None and self.stack.gateway.warmup_requests:
            took = warm_up(gate_target, self.stack.gateway.warmup_requests)
            result.timings["warmup"] = sum(took)
            result.notes.append(
                "warm-up before clients: " + ", ".join(f"{t:.2f}s" for t in took) + " per request"
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
            self._restore(previous)
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

    def _restore(self, previous: RunningVariant) -> None:
        self.say(f"rolling back to {previous.variant}")
        if self.parked == previous.variant:  # it was put to sleep: wake it again
            sleeper = standby.sleeper_of(self.stack, self.client, previous.variant)
            if sleeper is not None:
                began = time.monotonic()
                standby.wake(self._control(), sleeper, previous.variant, self.stack)
                self.gate(self._past_the_hold(running_target(self.stack, previous)), began)
                standby.check_awake(self._control(), previous.variant)
                return
        compose_file = Path(previous.config_file) if previous.config_file else None
        if compose_file is None or not compose_file.is_file():
            compose_file = run_file(resolve_target(self.stack, previous.variant))
        began = time.monotonic()
        previous_target = resolve_target(self.stack, previous.variant)
        self.start(compose_file, previous_target.spec.compose_service)
        self._route(previous_target)
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
    with swap_lock(stack.project, options.wait_for_lock, progress):
        return swapper.up(target)


def down(stack: Stack, *, client: docker.DockerClient, progress: Say = _quiet) -> str | None:
    """Stop and remove the running variant under the project's lock."""
    from composer.swap.lock import swap_lock

    with swap_lock(stack.project, True, progress):
        return Swapper(stack, client, UpOptions(), progress).down()


def down_variant(
    stack: Stack, variant: str, *, client: docker.DockerClient, force: bool = False, progress: Say = _quiet
) -> str:
    """Stop one variant's container under the project's lock (see Swapper.down_variant)."""
    from composer.swap.lock import swap_lock

    with swap_lock(stack.project, True, progress):
        return Swapper(stack, client, UpOptions(), progress).down_variant(variant, force)
