"""The gateway knows what serves, and keeps it: the variants of its members (the live set's,
or the single member's as the host named it) are what `/gateway/status`, the serving metric
and a switch's history say, also after a restart of its container (the record in its state
folder, whole) and after a replacement (a new container on the same state folder, which keeps
the single member's variant and takes a live set from its own settings), and after a live
set went back to one variant. The status page shows every live member serving with its share
of the requests; a holder's probe is not a request."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from composer.gateway import GatewayControl
from composer.gateway.config import LiveSpec
from composer.gateway.host.client import DEFAULT_CONTROL_SOCKET
from composer.gateway.wire import PROBE_HEADER, STATUS_PROBE_HEADER
from tests.conftest import REPO

from .conftest import KEY
from .fakes import SERVED, FakeBackend, GatewayThread, InProcessExec, sse_request

AUTH = {"Authorization": f"Bearer {KEY}"}
CHAT = "/v1/chat/completions"


def start(state: Path, container: str, upstream: str, **settings) -> tuple[GatewayThread, GatewayControl]:
    """A gateway on the state folder `state`, in the container `container` (its own files: the
    control socket and the container's identity; a restart keeps them, a replacement has others)."""
    own = state / f"container-{container}"
    own.mkdir(exist_ok=True)
    gw = GatewayThread(
        upstream,
        api_key=KEY,
        served_name=SERVED,
        hold_timeout=30,
        state_dir=str(state),
        control_socket=str(own / "control.sock"),
        **settings,
    ).start()
    return gw, GatewayControl(InProcessExec(gw.config.control_socket))


def again(
    state: Path, old: GatewayThread, how: str, upstream: str, **settings
) -> tuple[GatewayThread, GatewayControl]:
    """`old` restarted (the same container, after its stop), or replaced (a new container
    started beside it, then the old one stops), or a new container after a stop (`down`, `up`)."""
    if how == "replaced":
        new = start(state, "b", upstream, **settings)
        old.stop()
        return new
    old.stop()
    return start(state, "a" if how == "restarted" else "b", upstream, **settings)


def pair(baseline: FakeBackend, mtp: FakeBackend) -> list[dict[str, str]]:
    """A live set of baseline/1 and mtp/1."""
    return [
        {"name": "baseline/1", "variant": "baseline", "url": baseline.url},
        {"name": "mtp/1", "variant": "mtp", "url": mtp.url},
    ]


def status(gw: GatewayThread) -> dict:
    return httpx.get(f"{gw.url}/gateway/status", headers=AUTH, timeout=10).json()


def serving_metric(gw: GatewayThread) -> set[str]:
    text = httpx.get(f"{gw.url}/gateway/metrics", timeout=10).text
    prefix = 'gateway_serving_variant_info{variant="'
    return {line[len(prefix) :].split('"', 1)[0] for line in text.splitlines() if line.startswith(prefix)}


def next_switch_from(gw: GatewayThread, ctl: GatewayControl, target: str) -> str | None:
    """The `from` of the history line of a switch to `target` (a hold's drain, then the release)."""
    ctl.drain(timeout_s=5, lease_s=30, target=target)
    assert status(gw)["switch"]["to"] == target
    ctl.release(serving=target)
    return status(gw)["switches"][0]["from"]


@pytest.fixture
def other() -> FakeBackend:
    server = FakeBackend().start()
    server.state.api_key = KEY
    yield server
    server.stop()


@pytest.mark.parametrize("how", ["restarted", "replaced"])
def test_one_variant_serving_is_known_after_a_restart_and_a_replacement(
    backend, tmp_path: Path, how: str
) -> None:
    gw, ctl = start(tmp_path, "a", backend.url)
    ctl.release(serving="baseline")  # how a swap ends: the host says what serves
    assert status(gw)["serving"] == ["baseline"]
    gw, ctl = again(tmp_path, gw, how, backend.url)
    try:
        gw.wait(lambda g: g.backend_ready)
        shown = status(gw)
        assert shown["serving"] == ["baseline"]
        assert shown["variants"]["baseline"]["state"] == "serving" and "unknown" not in shown["variants"]
        assert ctl.state().raw["switching"]["serving_variant"] == "baseline"
        assert serving_metric(gw) == {"baseline"}
        assert next_switch_from(gw, ctl, "mtp") == "baseline"
        assert serving_metric(gw) == {"mtp"}
    finally:
        gw.stop()


@pytest.mark.parametrize("how", ["restarted", "replaced"])
def test_a_live_set_serving_is_known_after_a_restart_and_a_replacement(
    backend, other: FakeBackend, tmp_path: Path, how: str
) -> None:
    members = pair(backend, other)
    gw, ctl = start(tmp_path, "a", "http://127.0.0.1:9")
    ctl.set_upstreams(members)  # published after the start: the container's settings name none
    assert status(gw)["serving"] == ["baseline", "mtp"]
    # a replacement's settings name the set it serves; the restarted container's, none
    live = tuple(LiveSpec(**m) for m in members) if how == "replaced" else ()
    gw, ctl = again(tmp_path, gw, how, "http://127.0.0.1:9", live_upstreams=live)
    try:
        gw.wait(lambda g: g.backend_ready)
        assert [u.name for u in ctl.state().upstreams] == ["baseline/1", "mtp/1"]
        shown = status(gw)
        assert shown["serving"] == ["baseline", "mtp"]
        assert {v: c["state"] for v, c in shown["variants"].items()} == {
            "baseline": "serving",
            "mtp": "serving",
        }
        assert serving_metric(gw) == {"baseline", "mtp"}
        assert next_switch_from(gw, ctl, "baseline") == "baseline, mtp"
    finally:
        gw.stop()


def test_after_a_live_set_goes_back_to_one_variant_a_replacement_knows_it(
    backend, other: FakeBackend, tmp_path: Path
) -> None:
    members = [
        {"name": "baseline/1", "variant": "baseline", "url": other.url},
        {"name": "mtp/1", "variant": "mtp", "url": other.url},
    ]
    gw, ctl = start(tmp_path, "a", backend.url)
    ctl.set_upstreams(members)
    ctl.set_upstreams([], single_variant="baseline")  # `up baseline` from the set
    assert status(gw)["serving"] == ["baseline"] and serving_metric(gw) == {"baseline"}
    gw, ctl = again(tmp_path, gw, "replaced", backend.url)  # its settings name no member any more
    try:
        gw.wait(lambda g: g.backend_ready)
        assert status(gw)["serving"] == ["baseline"] and serving_metric(gw) == {"baseline"}
        assert next_switch_from(gw, ctl, "mtp") == "baseline"
    finally:
        gw.stop()


def test_route_names_the_single_members_variant_and_a_new_set_of_settings_is_not_stale(
    backend, other: FakeBackend, tmp_path: Path
) -> None:
    """`route(url, variant)` names what serves; a replacement whose settings name a live set
    takes that set, not the record's single member."""
    gw, ctl = start(tmp_path, "a", backend.url)
    assert ctl.route(other.url, "mtp") == backend.url
    assert status(gw)["serving"] == ["mtp"] and ctl.state().upstream == other.url
    live = (LiveSpec("baseline/1", "baseline", backend.url),)
    gw, ctl = again(tmp_path, gw, "replaced", "http://127.0.0.1:9", live_upstreams=live)
    try:
        gw.wait(lambda g: g.backend_ready)
        assert status(gw)["serving"] == ["baseline"] and serving_metric(gw) == {"baseline"}
    finally:
        gw.stop()


def test_a_new_gateway_after_a_stop_does_not_name_what_served_before(backend, tmp_path: Path) -> None:
    """`down`, then `up`: the record of the stopped gateway names no variant for a new one."""
    gw, ctl = start(tmp_path, "a", backend.url)
    ctl.release(serving="baseline")
    gw, ctl = again(tmp_path, gw, "after a stop", backend.url)
    try:
        assert status(gw)["serving"] == [] and serving_metric(gw) == set()
        assert next_switch_from(gw, ctl, "mtp") is None
    finally:
        gw.stop()


def test_every_live_member_serves_with_its_share_and_probes_are_not_requests(
    backend, other: FakeBackend, tmp_path: Path
) -> None:
    gw, ctl = start(tmp_path, "a", "http://127.0.0.1:9")
    try:
        ctl.set_upstreams(pair(backend, other))
        for n in range(4):  # least outstanding, then least served: two each
            reply = httpx.post(gw.url + CHAT, content=sse_request(f"r{n}"), headers=AUTH, timeout=30)
            assert reply.status_code == 200
        shown = status(gw)["variants"]
        assert {v: (c["state"], c["share"]) for v, c in shown.items()} == {
            "baseline": ("serving", 0.5),
            "mtp": ("serving", 0.5),
        }
        token = "p" * 40
        hold = ctl.hold(lease_s=30, probe_token=token)
        probe = httpx.post(
            gw.url + CHAT, content=sse_request("probe"), headers={**AUTH, PROBE_HEADER: token}, timeout=30
        )
        assert probe.status_code == 200
        ctl.release(hold.id)
        marked = {**AUTH, STATUS_PROBE_HEADER: "1"}  # `compose-spec status` through the port
        for path in ("/health", "/v1/models"):
            assert httpx.get(gw.url + path, headers=marked, timeout=30).status_code == 200
        assert httpx.post(gw.url + CHAT, content=sse_request("status"), headers=marked, timeout=30).is_success
        served = {u.name: (u.requests, u.served) for u in ctl.state().upstreams}
        assert served == {"baseline/1": (2, 2), "mtp/1": (2, 2)}
    finally:
        gw.stop()


def test_a_live_set_lists_the_aliases_in_v1_models(backend, other: FakeBackend, tmp_path: Path) -> None:
    gw, ctl = start(tmp_path, "a", backend.url, aliases=(("fast", "mtp"),))
    try:
        gw.wait(lambda g: g.backend_ready)
        listed = httpx.get(gw.url + "/v1/models", headers=AUTH, timeout=10).json()
        assert [m["id"] for m in listed["data"]] == [SERVED]  # no switching: no alias to name
        ctl.set_upstreams(pair(backend, other))
        listed = httpx.get(gw.url + "/v1/models", headers=AUTH, timeout=10).json()
        assert [(m["id"], m.get("variant")) for m in listed["data"]] == [(SERVED, None), ("fast", "mtp")]
    finally:
        gw.stop()


def test_compose_spec_status_probing_through_the_port_is_not_counted(
    backend, other: FakeBackend, tmp_path: Path
) -> None:
    from composer.engine.gate import GateTarget
    from composer.swap.status import readiness

    gw, ctl = start(tmp_path, "a", "http://127.0.0.1:9")
    try:
        ctl.set_upstreams(pair(backend, other))
        readiness(GateTarget("baseline", gw.port, "127.0.0.1", SERVED, KEY))  # its verdict aside
        assert status(gw)["requests"]["forwarded_total"] >= 3  # /health, /v1/models, a completion
        assert {u.name: (u.requests, u.served) for u in ctl.state().upstreams} == {
            "baseline/1": (0, 0),
            "mtp/1": (0, 0),
        }
    finally:
        gw.stop()


class _Look:
    """Runs the host's `look` script as a local process against this gateway's control socket."""

    def __init__(self, socket_path: str) -> None:
        self.socket_path = socket_path

    def exec_run(self, cmd: list[str], demux: bool = True) -> tuple[int, tuple[bytes, bytes]]:
        argv = [sys.executable, *(self.socket_path if c == DEFAULT_CONTROL_SOCKET else c for c in cmd[1:])]
        done = subprocess.run(
            argv, capture_output=True, env={**os.environ, "PYTHONPATH": str(REPO)}, timeout=120
        )
        return done.returncode, (done.stdout, done.stderr)


def test_the_hosts_look_reads_the_one_state_shape(backend, tmp_path: Path) -> None:
    """`status` and the snapshot read the gateway in one exec (`look`): its state has no
    `upstream` field of its own any more, the single member's URL is its entry's."""
    gw, ctl = start(tmp_path, "a", backend.url)
    try:
        state, _ = GatewayControl(_Look(gw.config.control_socket)).look([])
        assert state is not None and state.upstream == backend.url
        assert [(u.name, u.url) for u in state.upstreams] == [("single", backend.url)]
        assert state.live_set == frozenset()  # the single member is no live set
        ctl.set_upstreams([{"name": "mtp/1", "variant": "mtp", "url": backend.url}])
        assert ctl.state().live_set == {"mtp/1"}
    finally:
        gw.stop()
