"""The running variant as plain data and text; the API key is never part of it.

Readiness is the swap gate's own verdict (one probe: /health, /v1/models, a 1-token
completion). Docker's healthcheck is shown only when it disagrees in a way a user can act
on (`unhealthy`, or `healthy` while the gate fails). A variant that does not run is
reported with its exit code, when it stopped and its last log lines. A live set (`status`
and `ls`) is one row per live container: its GPUs (labels) and the gateway's readiness,
outstanding, served and errors per upstream (None, shown as "-", where it does not say).
"""

from __future__ import annotations

from dataclasses import asdict
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import httpx

from composer.capacity.model import host_ram_asleep
from composer.doctor.switch_checks import follower_warning
from composer.engine import bootlog
from composer.engine.containers import RunningVariant
from composer.engine.gate import GateTarget, running_target
from composer.engine.health import probe
from composer.engine.images import image_facts
from composer.engine.published_port import DEAD_PORT, probe_published
from composer.errors import ComposerError
from composer.gateway.wire import STATUS_PROBE_HEADER
from composer.render.target import resolve_target
from composer.stack.model import Stack
from composer.stack.workload_classes import live_routing
from composer.swap import snapshot
from composer.swap.gateway_port import port_is_dead
from composer.swap.journal import INTERRUPTED, read_history
from composer.swap.owner import owner_status
from composer.swap.ps import aligned
from composer.swap.transaction import upstream_states

if TYPE_CHECKING:
    import docker

LOG_LINES = 10


UNAUTHORIZED = "401: the key does not match the running container's"
NO_KEY = "401: VLLM_API_KEY is not set here, and the running container requires a key"


def readiness(target: GateTarget) -> tuple[str, str]:
    """(`ready` | `unauthorized` | `not ready`, what a user can act on)."""
    marked = {STATUS_PROBE_HEADER: "1"}  # through the gateway: not counted as a member's request
    with httpx.Client(timeout=httpx.Timeout(10.0, connect=0.5), trust_env=False, headers=marked) as client:
        state = probe(client, target.url, target.served_name, target.api_key)
    if state.ready:
        return "ready", ""
    if "(401)" in state.detail:
        return "unauthorized", UNAUTHORIZED if target.api_key else NO_KEY
    return "not ready", f"{state.step}: {state.detail}"


def docker_disagrees(health: str, docker_health: str | None) -> bool:
    """True when Docker's healthcheck says something the gate's verdict does not."""
    return docker_health == "unhealthy" or (docker_health == "healthy" and health == "not ready")


def _iso(moment: datetime | None) -> str | None:
    return moment.isoformat(timespec="seconds") if moment else None


def _exited(member: snapshot.Member, key: str | None) -> dict[str, object]:
    """What is known about a variant container that does not run."""
    described = member.info
    finished = described.finished_at
    ago = (datetime.now(UTC) - finished).total_seconds() if finished else None
    crashed = described.exit_code not in (0, None) or described.status == "restarting"
    return {
        "variant": described.variant,
        "container": described.name,
        "state": "restarting" if described.status == "restarting" else "crashed" if crashed else "stopped",
        "exit_code": described.exit_code,
        "finished_at": _iso(finished),
        "seconds_ago": round(ago, 1) if ago is not None else None,
        "restart_count": described.restart_count,
        "log_tail": bootlog.redact(bootlog.tail(member.container.log(tail=LOG_LINES * 4), LOG_LINES), key),
    }


# Docker's error when a container that shares another's network starts before that one runs.
HOLDER_RACE = "cannot join network of a non running container"


def gateway_status(stack: Stack, snap: snapshot.Snapshot) -> dict[str, object] | None:
    """The gateway's container and what its control channel reports (the snapshot's); None without one."""
    if not stack.gateway.enabled:
        return None
    container = snap.gateway
    if container is None:
        return {"state": "absent"}
    data: dict[str, object] = {"container": container.name, "state": container.status}
    if container.status != "running" and (error := container.attrs.get("State", {}).get("Error")):
        data["error"] = str(error)  # Docker's own reason when it could not start it
    if container.status == "running":
        data["published_port"] = probe_published(container, stack).to_json()
        state = snap.gateway_state
        if state is None:
            data["error"] = snap.gateway_error or "the control channel did not answer"
        else:
            data.update(
                backend_ready=state.backend_ready,
                held=state.held,
                inflight=state.inflight,
                holds=len(state.holds),
                waking=bool(state.raw.get("waking", False)),
                upstream=state.upstream,
                follower_attached=state.follower_attached,
            )
    return data


def follower_attached(stack: Stack, client: docker.DockerClient) -> bool | None:
    """Whether the gateway sees a `compose-spec follow` (None: no running gateway, or it does not say)."""
    state = snapshot.take(stack, client, gateway_state=True, ask_sleeping=False).gateway_state
    return state.follower_attached if state is not None else None


def gateway_down(gateway: object) -> str | None:
    """Why clients are refused when the gateway's container does not run (None: it runs, or
    there is no gateway): its state, Docker's reason, and what starts it again."""
    if not isinstance(gateway, dict) or gateway.get("state") == "running":
        return None
    said = f"{gateway.get('state')}: the port refuses connections"
    if HOLDER_RACE in str(gateway.get("error", "")):
        said += (
            "; Docker could not start it because its port holder was not running yet (after a "
            "daemon restart or a reboot Docker starts containers in no order and does not retry "
            "this one; `live-restore` in Docker's daemon.json keeps them running across a daemon restart)"
        )
    elif gateway.get("error"):
        said += f"; Docker could not start it: {gateway['error']}"
    return f"{said}; `compose-spec up VARIANT` starts it"


def _gateway_line(gateway: dict) -> str:
    if gateway.get("state") != "running":
        return str(gateway_down(gateway))
    if port_is_dead(gateway):
        return f"running ({gateway['container']}), but {DEAD_PORT}"
    if "error" in gateway:
        return f"running, control channel failed: {gateway['error']}"
    backend = "backend ready" if gateway["backend_ready"] else "backend not ready: requests are held"
    if gateway.get("waking"):
        backend = "backend waking from sleep: requests are held"
    hold = f", held by {gateway['holds']} swap(s)" if gateway["holds"] else ""
    counts = f"{gateway['held']} held, {gateway['inflight']} in flight"
    return f"running ({gateway['container']}): {counts}, {backend}{hold}"


def status_data(stack: Stack, client: docker.DockerClient) -> dict[str, object]:
    """What runs for this stack, from one snapshot and one probe (skipped while a swap runs or the
    gateway holds requests: the swap is named instead, so status answers at once)."""
    snap = snapshot.take(stack, client, gateway_state=True)
    data = _variant_status(stack, snap)
    data["gateway"] = gateway_status(stack, snap)
    data["swap"] = asdict(snap.swap) | {"line": snap.swap.line()} if snap.swap else None
    data["live"] = live_rows(snap)
    data["owner"] = owner = owner_status(snap, stack)  # another stack started what runs
    if data["live"]:
        data["routing"] = live_routing(stack.workloads, {str(r["variant"]) for r in data["live"]})[1]
    gateway = data["gateway"]
    attached = gateway.get("follower_attached") if isinstance(gateway, dict) else None
    data["warnings"] = [
        w
        for w in (
            owner["line"] if owner else None,
            follower_warning(stack, attached),
            interrupted_warning(stack.project),
            _restarted(data),
        )
        if w
    ]
    # this stack's key is refused where it runs (status exits 1): another stack's, or a key changed here
    data["key_mismatch"] = bool(owner and owner["key_mismatch"]) or data.get("health_detail") == UNAUTHORIZED
    if owner and owner["key_mismatch"] and data.get("health") == "unauthorized":
        data["health_detail"] = (
            f"401: it serves with the API key of {owner['stack_file']}, not this stack's"
            if owner["other_file"]
            else "401: it serves with the API key it was started with, not this one"
        )
    if data.get("running") and isinstance(gateway, dict) and gateway.get("waking"):
        data["health"] = "waking"  # the gateway runs a /wake_up on the variant it routes to
        data["health_detail"] = "waking from sleep: requests are held until the wake is over"
    elif data.get("running") and port_is_dead(gateway):  # behind a dead published port
        data["health"] = "unreachable"
        data["health_detail"] = DEAD_PORT
    elif (data.get("running") or data["live"]) and gateway_down(gateway):
        data["gateway_down"] = True  # status exits 1: what runs is out of clients' reach
        data["health"] = "unreachable"
        data["health_detail"] = "unreachable: the gateway does not run (see its line)"
    return data


def _events(project: str, last: int | None = None) -> list[dict]:
    try:
        return read_history(project, last).events
    except ComposerError:  # an unreadable history never fails status
        return []


def interrupted_warning(project: str) -> str | None:
    """A line naming the last swap when its process ended without finishing it (a killed `up`)."""
    last = next(iter(_events(project, 1)), {})
    if last.get("outcome") != INTERRUPTED:
        return None
    route = f"{last.get('source') or 'nothing'} -> {last.get('target')}"
    cause = str(last.get("cause") or "").split("; `compose-spec status`", 1)[0]  # this is status
    repair = " ".join(["compose-spec up", *str(last.get("target") or "").split("+")]).strip()
    return f"the last swap, {route}, was interrupted: {cause}; `{repair}` repairs it"


def _asleep(stack: Stack, member: snapshot.Member) -> dict[str, object]:
    """A sleeping (or awake, not serving) variant and the host RAM a sleeper's weights hold."""
    return {
        "variant": member.variant,
        "container": member.info.name,
        "state": member.state,
        "is_sleeping": member.sleeping,
        "restart_policy": member.info.restart_policy,
        "host_memory_bytes": host_ram_asleep(stack, member.variant) if member.asleep else None,
    }


def _held(snap: snapshot.Snapshot) -> tuple[str, str] | None:
    """(health, detail) when a probe through the shared port would wait on a hold now."""
    if snap.swap is not None and snap.swap.until is None:  # a probation's variant serves
        return "swapping", snap.swap.line()
    state = snap.gateway_state
    if state is not None and state.holds:
        return "held", "the gateway holds requests (a swap or a control hold is running)"
    if state is not None and not state.backend_ready:
        error = str(state.raw.get("backend_error") or "")
        return "not ready", "the gateway holds requests: the backend is not ready" + (
            f" ({error})" if error else ""
        )
    return None


def _variant_status(stack: Stack, snap: snapshot.Snapshot) -> dict[str, object]:
    stopped = [m for m in snap.members if not m.running]
    running = snap.current
    if running is None:
        newest = stopped[0] if stopped else None
        looping = newest is not None and newest.info.status == "restarting"  # Docker restarts it again
        since = restarts_since_swap(stack.project, newest.info) if newest and looping else 0
        data: dict[str, object] = {
            "project": stack.project,
            "running": False,
            "variant": None,
            "last_exit": _exited(newest, stack.api_key) if newest else None,
            "restarts_since_swap": since,
        }
    else:
        data = _serving_status(stack, running, _held(snap))
    data["stopped"] = [m.info.name for m in stopped]
    data["asleep"] = [_asleep(stack, m) for m in snap.asleep]
    data["awake"] = [_asleep(stack, m) for m in snap.awake_idle]
    if snap.route_ok is False:
        data["route"] = f"the gateway forwards to {snap.route}, not to the serving container"
    return data


def _serving_status(stack: Stack, running: RunningVariant, held: tuple[str, str] | None) -> dict[str, object]:
    target = running_target(stack, running)
    health, detail = held or readiness(target)
    current_hash = None
    if running.variant in stack.variants:
        current_hash = resolve_target(stack, running.variant).hash
    uptime = running.uptime_seconds()
    return {
        "project": stack.project,
        "running": True,
        "variant": running.variant,
        "container": running.name,
        "image": running.image,
        "health": health,
        "health_detail": detail,
        "docker_health": running.docker_health,
        "uptime_seconds": round(uptime, 1) if uptime is not None else None,
        "restart_count": running.restart_count,
        "restarts_since_swap": restarts_since_swap(stack.project, running),
        # Docker resets the exit code when it restarts a container: only the time is known.
        "last_exit": {"finished_at": _iso(running.finished_at)} if running.restart_count else None,
        "port": running.port,
        "url": target.url,
        "served_model_name": running.served_name,
        "config_hash": running.config_hash,
        "matches_stack": current_hash == running.config_hash if current_hash else None,
    }


def _restarted(data: dict[str, object]) -> str | None:
    """The warning for a serving variant that Docker restarted since its swap (status exits 1)."""
    since = data.get("restarts_since_swap")
    last = data.get("last_exit")
    variant = data.get("variant") or (last.get("variant") if isinstance(last, dict) else None)
    if not since:
        return None
    return (
        f"{variant} restarted {since} time(s) since the swap that made it serve: it crashed "
        "(`compose-spec logs` shows why; `compose-spec up VARIANT` swaps to another)"
    )


def restarts_since_swap(project: str, running: RunningVariant) -> int:
    """Docker's restarts of the serving container since the swap that made it serve (its
    restart count less the one that swap recorded; all when none did)."""
    for event in reversed(_events(project)):
        mark = event.get("serving_container")
        if isinstance(mark, dict) and mark.get("id") == running.container_id:
            recorded = mark.get("restart_count")
            return max(0, running.restart_count - (recorded if isinstance(recorded, int) else 0))
    return running.restart_count


def without_clock(data: dict[str, object]) -> dict[str, object]:
    """status_data() without the fields that change every second (to spot real changes)."""
    clock = {"uptime_seconds", "seconds_ago"}
    shown = {k: v for k, v in data.items() if k not in clock}
    if isinstance(data.get("last_exit"), dict):
        shown["last_exit"] = {k: v for k, v in data["last_exit"].items() if k not in clock}
    return shown


def _duration(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    minutes, secs = divmod(int(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h{minutes:02d}m{secs:02d}s" if hours else f"{minutes}m{secs:02d}s"


def _format_exit(project: str, last: dict) -> str:
    when = f"at {last['finished_at']} ({_duration(last['seconds_ago'])} ago)" if last["finished_at"] else ""
    what = {"restarting": "is crash-looping", "crashed": "crashed"}.get(last["state"], "stopped")
    head = f"{last['variant']} {what}: exit code {last['exit_code']} {when}"
    if last["state"] == "restarting":
        head += f", restarted {last['restart_count']} time(s)"
    lines = [f"project {project}: no variant is running; {head.strip()}"]
    lines.append(f"container: {last['container']} (`compose-spec logs` shows its whole log)")
    if last["log_tail"]:
        lines += ["last log lines:", *("  " + line for line in str(last["log_tail"]).splitlines())]
    return "\n".join(lines)


def format_status(data: dict) -> str:
    """Human-readable form of status_data(), its warnings last."""
    warnings = "".join(f"\n{'warning':<14}{w}" for w in data.get("warnings") or ())
    live = data.get("live") or []
    routing = f"\n{'routing':<14}{data.get('routing')}\n" + format_live(live) if live else ""
    if live and (not data["running"] or data.get("container") in {r["container"] for r in live}):
        gateway = f"\n{'gateway':<14}{_gateway_line(data['gateway'])}" if data.get("gateway") else ""
        header = f"project {data['project']}: live set of {len(live)} container(s)"
        return header + gateway + routing + warnings
    return _format_status(data) + routing + warnings


def _format_status(data: dict) -> str:
    gateway = f"\n{'gateway':<14}{_gateway_line(data['gateway'])}" if data.get("gateway") else ""
    asleep = "".join(f"\n{'asleep':<14}{_asleep_line(a)}" for a in data.get("asleep") or ())
    asleep += "".join(
        f"\n{'awake':<14}{a['variant']} ({a['container']}): running awake, not serving "
        "(the next `compose-spec up` stops it or routes to it)"
        for a in data.get("awake") or ()
    )
    if data.get("route"):
        asleep += f"\n{'route':<14}{data['route']} (`compose-spec up VARIANT` routes it again)"
    if not data["running"]:
        swap = f"\n{'swap':<14}{data['swap']['line']}" if data.get("swap") else ""
        head = f"project {data['project']}: no variant is running"
        if data.get("last_exit"):
            head = _format_exit(data["project"], data["last_exit"])
        return head + swap + gateway + asleep
    health = data["health"] if data["health"] == "ready" else data["health_detail"] or data["health"]
    if data["health"] == "not ready":
        health = f"not ready ({data['health_detail']})"
    if docker_disagrees(data["health"], data["docker_health"]):
        health += f" (docker healthcheck: {data['docker_health']})"
    rows = [
        ("variant", data["variant"]),
        ("health", health),
        ("served name", data["served_model_name"]),
        ("url", data["url"]),
        ("image", data["image"]),
        ("container", data["container"]),
        ("uptime", _duration(data["uptime_seconds"])),
    ]
    if (data.get("swap") or {}).get("until") is not None:
        rows.append(("probation", data["swap"]["line"]))
    if data["restart_count"]:
        last = data["last_exit"] or {}
        crashed = f"(last one at {last.get('finished_at')}; `compose-spec logs` shows why)"
        rows.append(("restarts", f"{data['restart_count']}: Docker restarted it after a crash {crashed}"))
    if data.get("owner"):
        rows.append(("owner", f"{data['owner']['stack_file']} (another stack: see the warning)"))
    elif data["matches_stack"] is False:
        applies = f"(`compose-spec up {data['variant']}` applies it)"
        rows.append(("matches stack", f"no: this stack now renders {data['variant']} differently {applies}"))
    elif data["matches_stack"] is None:
        rows.append(("matches stack", f"unknown: {data['variant']} is not a variant of this stack"))
    return "\n".join(f"{key:<14}{value}" for key, value in rows) + gateway + asleep


def _asleep_line(asleep: dict) -> str:
    held = asleep.get("host_memory_bytes")
    unknown = "host RAM held: unknown (set weights_bytes)"
    ram = f"holds {held / (1 << 30):.1f} GiB of host RAM" if held is not None else unknown
    return f"{asleep['variant']} ({asleep['container']}): {ram}"


def _number(value: object) -> int | None:
    return int(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def live_rows(snap: snapshot.Snapshot) -> list[dict[str, object]]:
    """One row per live container of the snapshot (with the gateway's state it read)."""
    states = upstream_states(snap.gateway_state.raw if snap.gateway_state else None)
    rows = []
    for member in snap.live:
        state = states.get(member.name, {})
        ready = state.get("ready")
        rows.append(
            {
                "name": member.name,
                "variant": member.variant,
                "container": member.container,
                "state": member.status,
                "gpus": member.gpus,
                "routed": member.name in states if states else None,
                "ready": ready if isinstance(ready, bool) else None,
                "outstanding": _number(state.get("outstanding")),
                "served": _number(state.get("served")),
                "served_last_minute": _number(state.get("served_1m")),
                "errors": _number(state.get("errors")),
            }
        )
    return rows


def _cell(value: object) -> str:
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    return str(value)


def format_live(rows: list[dict[str, object]]) -> str:
    """The live containers as a table ("-": not reported by the gateway)."""
    keys = ("name", "container", "state", "gpus", "ready", "outstanding", "served_last_minute", "served")
    table = [["LIVE", "CONTAINER", "STATE", "GPUS", "READY", "OUTSTANDING", "SERVED/1M", "SERVED", "ERRORS"]]
    table += [[_cell(row[key]) for key in (*keys, "errors")] for row in rows]
    return aligned(table)


def variants_data(stack: Stack, client: docker.DockerClient | None) -> list[dict[str, Any]]:
    """Every variant as `ls` (`--json`: these fields) shows it: method, K, image (and whether it is
    local), whether it serves, its workload classes and aliases, and why vLLM refuses it with this
    stack (`refused`)."""
    snap = snapshot.take(stack, client, ask_sleeping=True) if client is not None else None
    live = live_rows(snap) if snap is not None else []
    # what serves: the one serving container, or each live member running (not known unready)
    serves = {m.variant for m in snap.members if m.serving} if snap is not None else set()
    serves |= {str(r["variant"]) for r in live if r["state"] == "running" and r["ready"] is not False}
    asleep = {m.variant for m in snap.asleep} if snap is not None else set()
    rows = []
    for name, variant in stack.variants.items():
        spec = variant.speculative
        image = stack.image(variant.image_key)
        rows.append(
            {
                "variant": name,
                "method": spec.method if spec else None,
                "k": spec.num_speculative_tokens if spec else None,
                "image": image,
                "image_present": image_facts(client, "vllm", image).present,
                "serving": name in serves,
                "asleep": name in asleep and name not in serves,
                "workloads": sorted(w for w, v in stack.workloads.items() if v == name),
                "aliases": list(variant.aliases),
                "description": variant.description,
                "live": [r for r in live if r["variant"] == name],
                "refused": variant.refused,
            }
        )
    return rows


def format_variants(rows: list[dict[str, Any]]) -> str:
    """The variants as a table; `*` marks each one that serves, `z` each one asleep."""
    yes_no = {True: "yes", False: "no", None: "?"}
    table = [["", "VARIANT", "METHOD", "K", "IMAGE", "PRESENT", "WORKLOADS", "ALIASES"]]
    for row in rows:
        table.append(
            [
                "*" if row["serving"] else "z" if row.get("asleep") else "",
                str(row["variant"]),
                str(row["method"] or "-"),
                str(row["k"] or "-"),
                str(row["image"]),
                yes_no[row["image_present"]],
                ",".join(row["workloads"]) or "-",
                ",".join(row.get("aliases") or ()) or "-",
            ]
        )
    lines = [aligned(table)]
    serving = [str(r["variant"]) for r in rows if r["serving"]]
    live = [member for r in rows for member in r.get("live") or ()]
    if live:
        lines.append("live set: " + ", ".join(sorted({str(m["variant"]) for m in live})))
        lines.append(format_live(live))
    else:
        lines.append(f"* serves now: {', '.join(serving)}" if serving else "no variant serves now")
    asleep = [str(r["variant"]) for r in rows if r.get("asleep")]
    if asleep:
        lines.append(f"z asleep: {', '.join(asleep)} (`compose-spec up VARIANT` wakes one in seconds)")
    refused = [str(r["variant"]) for r in rows if r.get("refused")]
    if refused:
        lines.append(f"not startable with this stack: {', '.join(refused)} (compose-spec doctor says why)")
    return "\n".join(lines)
