"""Live sets: several variants (or replicas) serving at once behind the one gateway.

`up A B` (or `up` with `[gateway] live`) makes the live set exactly {A, B}; `up C` on a
running live set adds C. The change runs one container at a time and never leaves zero
ready upstreams: each new container is started from the live run file, gated like a swap
(the container watched, /health, /v1/models, one completion, a settle watch and, for a
speculative variant, acceptance from its /metrics over a short warm-up) and only then
added to the gateway's upstreams (`set_upstreams`); a container leaving the set is first
removed from the upstreams, its requests in flight drained (the gateway's `outstanding`
for it reaches 0, or the drain timeout), then stopped. A new container that fails its gate
is removed and the containers already serving keep serving. `plan_live` is pure and
`--dry-run` prints it.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Self

from composer import labels as label_names
from composer.engine.client import compose
from composer.engine.containers import gateway_container
from composer.engine.gate import GateTarget, wait_ready, watch_settled
from composer.engine.variant_container import VariantContainer
from composer.errors import ComposerError, GatewayControlError, SwapFailed, UsageError
from composer.render.files import prune_run_files, write_atomic
from composer.render.live import LiveService, LiveTarget, render_live, resolve_live
from composer.render.runfiles import compose_environment, state_dir
from composer.render.spec import CONTAINER_PORT, Owner
from composer.stack.model import Stack
from composer.stack.placement import live_members
from composer.stack.workload_classes import live_routing
from composer.swap import snapshot
from composer.swap.journal import append_history
from composer.swap.plan import foreign_members, takeover_notes, takeover_refusal

if TYPE_CHECKING:
    import docker

    from composer.engine.containers import RunningVariant
    from composer.gateway.client import GatewayControl
    from composer.swap.swapper import UpOptions

Say = Callable[[str], None]
DRAIN_POLL_S = 0.2


def _quiet(_: str) -> None:
    return None


@dataclass(frozen=True)
class LiveRunning:
    """A live container as Docker reports it (labels `live` and `gpus`)."""

    name: str  # the member: `mtp/1`
    variant: str
    container: str
    gpus: str
    config_hash: str
    status: str
    service: str
    owner: Owner | None = None  # the stack that started it, from its labels


@dataclass(frozen=True)
class LiveChange:
    """Which members a live-set change keeps, starts, stops and replaces (Docker and Kubernetes)."""

    variants: tuple[str, ...]
    keep: tuple[str, ...]  # members that serve on, untouched
    start: tuple[str, ...]  # members started and gated, one at a time
    stop: tuple[str, ...]  # members drained and stopped, one at a time (after every start)
    replace: tuple[str, ...] = ()  # members whose configuration changed: drained, stopped, started
    single: str | bool | None = None  # today's one serving container (not live)

    @classmethod
    def between(
        cls,
        variants: Sequence[str],
        members: Sequence[str],
        now: Collection[str],
        keep: tuple[str, ...],
        **more: Any,
    ) -> Self:
        """The change from the members that run `now` to `members`, keeping `keep` as they run."""
        return cls(
            variants=tuple(variants),
            keep=keep,
            start=tuple(n for n in members if n not in now),
            stop=tuple(n for n in sorted(now) if n not in members),
            replace=tuple(n for n in members if n in now and n not in keep),
            **more,
        )

    def as_data(self) -> dict[str, object]:
        return {
            "live": list(self.variants),
            "keep": list(self.keep),
            "start": list(self.start),
            "replace": list(self.replace),
            "stop": list(self.stop),
            "single": self.single,
        }


@dataclass(frozen=True)
class LivePlan(LiveChange):
    """What a live-set change does, in order: start and gate, then drain and stop."""

    single: str | None = None  # today's one serving container (not live): stopped once the set serves
    single_first: bool = False  # its GPUs are needed: stopped first (the gateway holds meanwhile)
    start_gateway: bool = False
    gpus: Mapping[str, str] = field(default_factory=dict)
    refused: str = ""  # why nothing changes: another stack started what runs (no --takeover)
    notes: tuple[str, ...] = ()

    @property
    def no_op(self) -> bool:
        return self.refused != "" or not (
            self.start or self.stop or self.replace or self.single or self.start_gateway
        )

    def as_data(self) -> dict[str, object]:
        return {**super().as_data(), "start_gateway": self.start_gateway, "refused": self.refused or None}

    def describe(self) -> str:
        """The plan in words, one step a line (`up --dry-run`)."""
        if self.refused:
            return f"refused: {self.refused}"
        before = sorted({*self.keep, *self.stop, *self.replace} | ({self.single} if self.single else set()))
        after = [*self.keep, *self.replace, *self.start]
        lines = [f"live set: {{{', '.join(before)}}} -> {{{', '.join(sorted(after))}}}"]
        step = 0

        def add(text: str) -> None:
            nonlocal step
            step += 1
            lines.append(f"  {step}. {text}")

        if self.start_gateway:
            add("start the gateway")
        if self.single and self.single_first:
            add(f"stop {self.single} (serving alone; its GPUs are needed): the gateway holds clients")
        for name in self.replace:
            add(
                f"drain {name} (its configuration changed), stop it, start it again on GPUs {self.gpus[name]}"
            )
        for name in self.start:
            add(f"start {name} on GPUs {self.gpus[name]}, gate it, add it to the gateway's upstreams")
        if self.single and not self.single_first:
            add(f"route the gateway to the live set, then drain and stop {self.single}")
        for name in self.stop:
            add(f"remove {name} from the upstreams, drain its requests, stop it")
        for name in self.keep:
            lines.append(f"  keep {name} (GPUs {self.gpus.get(name, '-')}): serves throughout")
        lines += [f"  note: {note}" for note in self.notes]
        if self.no_op:
            lines.append("  nothing to change: the live set already runs with this configuration")
        return "\n".join(lines)


@dataclass
class LiveResult:
    """What a live-set change did (the shape `report_swap` prints)."""

    variant: str
    outcome: str
    timings: dict[str, float] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    plan: dict[str, object] | None = None
    plan_text: str | None = None
    drained: dict[str, int] | None = None


def live_containers(stack: Stack, client: docker.DockerClient) -> list[LiveRunning]:
    """The project's live containers (any state), by member name."""
    found = client.containers.list(
        all=True,
        filters={"label": [f"{label_names.COMPOSE_PROJECT}={stack.project}", label_names.LIVE]},
    )
    rows = []
    for c in found:
        labels = c.labels or {}
        rows.append(
            LiveRunning(
                name=labels.get(label_names.LIVE, "?"),
                variant=labels.get(label_names.VARIANT, "?"),
                container=c.name or "",
                gpus=labels.get(label_names.GPUS, "-"),
                config_hash=labels.get(label_names.CONFIG_HASH, ""),
                status=c.status,
                service=labels.get(label_names.COMPOSE_SERVICE, ""),
                owner=Owner.from_labels(labels),
            )
        )
    return sorted(rows, key=lambda r: r.name)


def live_variants(requested: Sequence[str], stack: Stack, running: Sequence[LiveRunning]) -> list[str]:
    """The live set `up` aims at: several names are the set itself; none is `[gateway] live`;
    one name joins the live set that runs (or `[gateway] live` when none runs)."""
    if len(requested) > 1:
        return list(requested)
    base = list(dict.fromkeys(r.variant for r in running if r.status == "running")) or list(
        stack.gateway.live
    )
    if not requested:
        return base
    return base if requested[0] in base else [*base, requested[0]]


def ran_live(stack: Stack, directory: Path | None = None) -> bool:
    """A live set was started for this project (its run file is there): only then does a
    single-variant `up` look for live containers (a plain swap lists containers once)."""
    return any(((directory or state_dir()) / stack.project).glob("live-*.yml"))


def is_live(requested: Sequence[str], stack: Stack, running: Sequence[LiveRunning]) -> bool:
    """True when `up` changes a live set rather than swapping the one serving variant."""
    return len(requested) > 1 or bool(stack.gateway.live) or any(r.status == "running" for r in running)


def plan_live(
    target: LiveTarget,
    running: Sequence[LiveRunning],
    single: RunningVariant | None = None,
    gateway_running: bool = True,
    gpus_shared: bool = False,
    owner: Owner | None = None,
    takeover: bool = False,
) -> LivePlan:
    """Decide the change (pure): keep what runs with the same configuration, start what is new,
    restart what changed, stop what leaves. `gpus_shared`: the one serving (non-live)
    container's GPUs overlap the live set's, so it stops first. A running container another
    stack started (its labels differ from `owner`) is refused, or with `takeover` restarted."""
    wanted = {s.name: s for s in target.services}
    now = {r.name: r for r in running if r.status == "running"}
    found = [(r.name, r.container, r.owner) for r in now.values()]
    if single is not None:
        found.append((single.variant, single.name, single.owner))
    foreign = foreign_members(owner, found)
    project = target.services[0].spec.project if target.services else ""
    if foreign and not takeover:
        return LivePlan(target.variants, (), (), (), refused=takeover_refusal(foreign, project))
    taken = {f.variant for f in foreign}
    keep = tuple(
        n for n in wanted if n in now and now[n].config_hash == wanted[n].spec.hash and n not in taken
    )
    return LivePlan.between(
        target.variants,
        list(wanted),
        now,
        keep,
        single=single.variant if single is not None else None,
        single_first=single is not None and gpus_shared,
        start_gateway=target.gateway is not None and not gateway_running,
        gpus={n: s.member.gpus_text for n, s in wanted.items()} | {n: r.gpus for n, r in now.items()},
        notes=tuple(takeover_notes(foreign, project)),
    )


def set_upstreams(control: GatewayControl, upstreams: list[dict[str, str]]) -> None:
    """Tell the gateway the live set it routes among; SwapFailed when it does not take it."""
    try:
        control.set_upstreams(upstreams)
    except GatewayControlError as err:
        raise SwapFailed(
            f"the gateway did not take the live set ({', '.join(u['name'] for u in upstreams)}): {err}; "
            "a gateway image without live sets needs a rebuild (bash images/gateway/build.sh)"
        ) from err


def upstream_states(raw: Mapping[str, Any] | None) -> dict[str, dict[str, Any]]:
    """Per-upstream fields of the gateway's state (`upstreams`: a list or a mapping by name);
    empty when the gateway does not report them."""
    found = (raw or {}).get("upstreams")
    if isinstance(found, Mapping):
        return {str(k): dict(v) for k, v in found.items() if isinstance(v, Mapping)}
    if isinstance(found, list):
        return {str(u.get("name")): dict(u) for u in found if isinstance(u, Mapping) and u.get("name")}
    return {}


def live_acceptance(target: GateTarget, floor: float) -> float:
    """A speculative variant's acceptance over a short warm-up, from its own /metrics deltas
    at `target` (its own address, no gateway between): above `floor`, or HealthCheckFailed
    (decoding would be slower). The Kubernetes live rollout checks a new variant with it too."""
    import httpx

    from composer.errors import HealthCheckFailed
    from composer.swap.standby import acceptance_over_warm_up, spec_counters

    def counters() -> tuple[float, float]:
        try:
            reply = httpx.get(f"{target.url}/metrics", timeout=30.0, trust_env=False)
            return spec_counters(reply.text)
        except (httpx.HTTPError, ValueError) as err:
            raise HealthCheckFailed(f"{target.variant}: /metrics could not be read: {err}") from err

    rate = acceptance_over_warm_up(counters, target)
    if rate is None:
        raise HealthCheckFailed(f"{target.variant} drafted no tokens over its warm-up")
    if rate <= floor:
        raise HealthCheckFailed(
            f"{target.variant} accepts {rate:.2f} of its draft tokens, at or below the floor "
            f"{floor:.2f} (stack.acceptance_floor)"
        )
    return rate


class LiveSwapper:
    """Runs live plans for one stack against one Docker engine."""

    def __init__(
        self,
        stack: Stack,
        client: docker.DockerClient,
        timeout: float = 900.0,
        settle: float = 1.0,
        poll_interval: float = 0.1,
        progress: Say = _quiet,
        waiting: Say | None = None,
        takeover: bool = False,
    ) -> None:
        self.stack = stack
        self.takeover = takeover
        self.client = client
        self.timeout = timeout
        self.settle = settle
        self.poll_interval = poll_interval
        self.say = progress
        self.waiting = waiting or progress

    # -- reading --------------------------------------------------------------------------
    def decide(self, target: LiveTarget) -> LivePlan:
        running = live_containers(self.stack, self.client)
        single = snapshot.take(self.stack, self.client).current
        gateway = gateway_container(self.stack, self.client)
        shared = False
        if single is not None and self.stack.gpus is not None:
            used = set(self.stack.gpus)
            shared = "all" in used or any(used & set(s.member.gpus or used) for s in target.services)
        gateway_running = gateway is not None and gateway.status == "running"
        owner = Owner.of(self.stack)
        return plan_live(target, running, single, gateway_running, shared, owner, self.takeover)

    # -- steps ----------------------------------------------------------------------------
    def _compose_up(self, compose_file: Path, service: str) -> None:
        compose(
            self.stack.project,
            compose_file,
            ["up", "--detach", "--no-build", "--pull", "never", service],
            env=compose_environment(compose_file, self.stack.api_key),
            timeout=max(120.0, self.timeout),
        )

    def _control(self) -> GatewayControl | None:
        from composer.gateway.client import GatewayControl

        gateway = gateway_container(self.stack, self.client)
        return GatewayControl(gateway) if gateway is not None else None

    def _container(self, name: str) -> VariantContainer:
        from docker.errors import NotFound

        try:
            return VariantContainer(self.client.containers.get(name))
        except NotFound:
            raise SwapFailed(f"{name} was not created") from None

    def _address(self, container: VariantContainer) -> str:
        """The container's address on the project's network (the gate reaches it directly)."""
        container.container.reload()
        networks = container.container.attrs.get("NetworkSettings", {}).get("Networks") or {}
        for network in networks.values():
            if network.get("IPAddress"):
                return str(network["IPAddress"])
        raise SwapFailed(f"{container.name} has no address on the project's network")

    def gate(self, service: LiveService) -> float:
        """Start-to-ready of a started member: the swap's gate on its own address, then a settle watch."""
        began = time.monotonic()
        container = self._container(service.spec.container_name)
        target = GateTarget(
            service.name,
            CONTAINER_PORT,
            self._address(container),
            self.stack.served_model_name,
            self.stack.api_key,
        )
        wait_ready(container, target, began + self.timeout, self.poll_interval, self.waiting)
        ready = time.monotonic() - began
        self.say(f"{service.name} is ready ({ready:.1f}s); watching it settle")
        watch_settled(container, target, self.settle, self.poll_interval)
        if self.stack.variant(service.member.variant).speculative is not None:
            rate = self.acceptance(target)
            self.say(f"{service.name} accepts {rate:.2f} of its draft tokens")
        return ready

    def acceptance(self, target: GateTarget) -> float:
        """A speculative member's acceptance over a short warm-up (`live_acceptance`)."""
        return live_acceptance(target, self.stack.acceptance_floor)

    def publish(self, upstreams: list[dict[str, str]]) -> None:
        """Tell the gateway the set it routes among."""
        control = self._control()
        if control is None:
            return
        set_upstreams(control, upstreams)

    def drain(self, name: str) -> int:
        """Wait until the gateway has no request in flight on `name` (or the drain timeout); return
        the requests still running at the timeout (0 when the gateway does not report them)."""
        control = self._control()
        if control is None:
            return 0
        deadline = time.monotonic() + self.stack.gateway.drain_timeout
        left = 0
        while True:
            try:
                state = upstream_states(control.state().raw).get(name)
            except GatewayControlError:
                return 0
            left = int((state or {}).get("outstanding") or 0)
            if left == 0 or time.monotonic() >= deadline:
                return left
            time.sleep(DRAIN_POLL_S)

    def stop_member(self, running: LiveRunning) -> None:
        self.say(f"stopping {running.name} ({running.container})")
        try:
            self._container(running.container).stop_and_remove(self.stack.stop_grace_period)
        except SwapFailed:  # already gone
            return

    # -- the change -----------------------------------------------------------------------
    def up(self, target: LiveTarget, dry_run: bool = False) -> LiveResult:
        """Change the live set to `target` (see the module's docstring)."""
        began = time.monotonic()
        plan = self.decide(target)
        label = "+".join(target.variants)
        result = LiveResult(variant=label, outcome="planned", plan=plan.as_data(), plan_text=plan.describe())
        if dry_run:
            result.outcome = "refused" if plan.refused else "unchanged" if plan.no_op else "planned"
            return result
        if plan.refused:
            raise UsageError(plan.refused)
        if plan.no_op:
            # The gateway may have restarted with an older set in its environment: tell it again.
            self.publish(target.upstreams())
            result.outcome = "unchanged"
            result.notes.append(f"the live set {{{', '.join(target.variants)}}} already runs")
            result.timings["total"] = time.monotonic() - began
            return result
        compose_file = live_run_file(target)
        prune_run_files(self.stack.project, "live", keep=(compose_file,))
        services = {s.name: s for s in target.services}
        running = {r.name: r for r in live_containers(self.stack, self.client)}
        serving = [services[n].upstream() for n in plan.keep]  # what the gateway routes among now
        cut = 0
        if plan.start_gateway:
            self.say("starting the gateway")
            self._compose_up(compose_file, "gateway")
        if plan.single and plan.single_first:
            self._stop_single()
        try:
            for name in plan.replace:
                serving = [u for u in serving if u["name"] != name]
                if serving:
                    self.publish(serving)
                    cut += self.drain(name)
                self.stop_member(running[name])
                self._start(services[name], compose_file, result)
                serving.append(services[name].upstream())
                self.publish(serving)
            for name in plan.start:
                self._start(services[name], compose_file, result)
                serving.append(services[name].upstream())
                self.publish(serving)
        except BaseException as err:
            self._history(plan, "failed", result, err)
            raise
        if plan.single and not plan.single_first:
            self._stop_single()
        for name in plan.stop:
            self.publish(serving)  # without it: no new request reaches it
            cut += self.drain(name)
            self.stop_member(running[name])
        if plan.start_gateway:
            self._answers("+".join(target.variants))
        result.drained = {"cut": cut}
        if cut:
            result.warnings.append(f"{cut} request(s) still running after the drain timeout were cut")
        members = ", ".join(f"{n} (GPUs {s.member.gpus_text})" for n, s in services.items())
        result.outcome = f"live set {members}"
        result.timings["total"] = time.monotonic() - began
        self._history(plan, result.outcome, result)
        return result

    def _answers(self, names: str) -> None:
        """A gateway this change started answers through the published port and reaches the
        set before `up` returns: the first request after it is neither refused nor reset."""
        from composer.engine.published_port import ANSWER_TIMEOUT, wait_published

        gateway = gateway_container(self.stack, self.client)
        published = wait_published(gateway, self.stack) if gateway is not None else None
        if published is None or not published.answers:
            detail = published.detail if published is not None else "its container is gone"
            raise SwapFailed(f"the started gateway does not answer through the published port: {detail}")
        control = self._control()
        if control is not None and not control.wait_ready(ANSWER_TIMEOUT):
            self.say(f"the gateway answers but does not reach {names} after {ANSWER_TIMEOUT:.0f}s")

    def _start(self, service: LiveService, compose_file: Path, result: LiveResult) -> None:
        """Start one member and gate it; on failure remove it (the others keep serving)."""
        self.say(f"starting {service.name} on GPUs {service.member.gpus_text}")
        try:
            self._compose_up(compose_file, service.spec.compose_service)
            result.timings[f"{service.name} start_to_ready"] = self.gate(service)
        except BaseException as err:
            cause = "interrupted" if isinstance(err, KeyboardInterrupt) else str(err).splitlines()[0]
            try:
                self._container(service.spec.container_name).stop_and_remove(self.stack.stop_grace_period)
                left = "it was removed; the live set's other containers serve on"
            except ComposerError as stop_err:
                left = f"could not remove it: {stop_err}"
            tail = getattr(err, "log_tail", "") or ""
            hints = getattr(err, "hints", ()) or ()
            raise SwapFailed(f"{service.name} failed: {cause}; {left}", tail, tuple(hints)) from err

    def _stop_single(self) -> None:
        """Stop today's one serving container (not live): the live set serves instead."""
        for member in snapshot.take(self.stack, self.client).members:
            if not member.asleep:
                self.say(f"stopping {member.variant} ({member.container.name}): the live set serves")
                member.container.stop_and_remove(self.stack.stop_grace_period)

    def _history(
        self, plan: LivePlan, outcome: str, result: LiveResult, err: BaseException | None = None
    ) -> None:
        append_history(
            self.stack.project,
            {
                "kind": "live",
                "source": None,
                "target": "+".join(plan.variants),
                "outcome": outcome,
                "steps": [*(f"start {n}" for n in plan.start), *(f"stop {n}" for n in plan.stop)],
                "timings": {k: round(v, 3) for k, v in result.timings.items()},
                "cause": str(err).splitlines()[0][:500] if err else None,
            },
        )

    def remove(self, variant: str) -> str:
        """`down VARIANT` on a live set: drain and stop its containers; refused when it is all
        that serves (use `down`)."""
        running = [r for r in live_containers(self.stack, self.client) if r.status == "running"]
        mine = [r for r in running if r.variant == variant]
        if not mine:
            return f"{variant} is not live; nothing stopped"
        others = [r for r in running if r.variant != variant]
        if not others:
            from composer.errors import DownRefused

            raise DownRefused(
                f"{variant} is all the live set serves: stopping it leaves nothing serving; "
                "`compose-spec down` stops everything"
            )
        target = resolve_live(self.stack, list(dict.fromkeys(r.variant for r in others)))
        self.publish(target.upstreams())
        cut = 0
        for member in mine:
            cut += self.drain(member.name)
            self.stop_member(member)
        said = f"stopped {variant} ({', '.join(m.name for m in mine)}); the live set serves on"
        return said + (f" ({cut} request(s) cut at the drain timeout)" if cut else "")


def live_run_file(target: LiveTarget, directory: Path | None = None) -> Path:
    """Write (if needed) and return the live set's run file: `live-<hash>.yml` in the state folder."""
    project = target.services[0].spec.project
    out = (directory or state_dir()) / project
    (file,) = render_live(target, out, f"live-{target.hash}.yml")
    write_atomic(file)
    return file.path


def up_live(
    stack: Stack,
    requested: Sequence[str],
    *,
    client: docker.DockerClient,
    timeout: float = 900.0,
    settle: float = 1.0,
    wait_for_lock: bool = True,
    dry_run: bool = False,
    progress: Say = _quiet,
    waiting: Say | None = None,
    options: UpOptions | None = None,
) -> LiveResult:
    """Change the live set under the project's lock (`dry_run`: the plan only, no lock).
    `options.profiles`: optional services (`--with`) checked first, started once the set serves."""
    from composer.swap.lock import swap_lock
    from composer.swap.profiles import check_profiles, start_profiles
    from composer.swap.steps import Context

    if len(requested) > 1:
        live_members(stack, requested)  # the set as named: refused before Docker is asked anything
    names = live_variants(requested, stack, live_containers(stack, client))
    target = resolve_live(stack, names)  # unknown names, overlapping GPU sets: exit 2 first
    takeover = options is not None and options.takeover
    swapper = LiveSwapper(
        stack, client, timeout, settle, progress=progress, waiting=waiting, takeover=takeover
    )
    by_class, routing = live_routing(stack.workloads, target.variants)
    if dry_run:
        result = swapper.up(target, dry_run=True)
        result.notes += [] if by_class else [f"the live set routes {routing}"]
        return result
    ctx = Context(stack, client, options, progress, waiting or progress) if options else None
    if ctx is not None:
        check_profiles(ctx, target.prometheus)
    with swap_lock(stack.project, wait_for_lock, progress):
        result = swapper.up(target)
        result.notes += [] if by_class else [f"the live set routes {routing}"]
        if ctx is not None and ctx.options.profiles:
            result.notes += start_profiles(ctx, live_run_file(target))
        return result


def down_live(stack: Stack, variant: str, *, client: docker.DockerClient, progress: Say = _quiet) -> str:
    """Drain and stop one variant of the live set under the project's lock."""
    from composer.swap.lock import swap_lock

    with swap_lock(stack.project, True, progress):
        return LiveSwapper(stack, client, progress=progress).remove(variant)
