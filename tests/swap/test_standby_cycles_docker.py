"""Many sleep-standby switches on the real daemon with the simulator: nothing grows.

Each switch runs the swap itself (`composer.swap.entry.up_set`, what `compose-spec up`
calls, in this process to save a Python start per switch): drain, sleep, route, wake,
gate, acceptance check, warm-up, release. After every switch: the project's containers,
the planner's sleepers and the gateway's accounting (held, in flight, holds); every
SAMPLE_EVERY switches: the simulator's GPU memory per container, the gateway's open
upstream connections (/proc/net/tcp inside it) and its resident memory. STANDBY_SWITCHES
sets how many switches: 20 by default (about 5 s each on a busy 2-core machine), 100
under `make bench`.
"""

from __future__ import annotations

import os
import time

import pytest

from composer.capacity import standby
from composer.engine.containers import gateway_container
from composer.gateway.host.client import GatewayControl
from composer.stack.load import load_stack
from composer.swap.entry import up_set
from composer.swap.outcome import UpOptions
from composer.swap.snapshot import take
from tests.conftest import REPO

pytestmark = pytest.mark.docker

SWITCHES = int(os.environ.get("STANDBY_SWITCHES", "20"))  # make bench runs 100
SAMPLE_EVERY = 10
UPSTREAM_PORT = f"{8000:04X}"
ESTABLISHED = "01"


def _in_process_stack(sim_stack, monkeypatch):
    for name in ("XDG_STATE_HOME", "XDG_RUNTIME_DIR", "VLLM_API_KEY"):
        monkeypatch.setenv(name, sim_stack.env[name])
    text = sim_stack.stack_file.read_text(encoding="utf-8")
    text = text.replace("[stack.env]\n", 'standby = "sleep"\n[stack.env]\n').replace(
        'SIM_TIME_SCALE = "20"', 'SIM_TIME_SCALE = "100"'
    )
    sim_stack.stack_file.write_text(text, encoding="utf-8")
    return load_stack(
        [REPO / "composer.toml", sim_stack.stack_file], REPO / ".env.demo", environ=sim_stack.env
    )


def _upstream_connections(gateway) -> int:
    """ESTABLISHED TCP connections from the gateway to port 8000 (its upstreams)."""
    code, out = gateway.exec_run(["cat", "/proc/net/tcp", "/proc/net/tcp6"])
    assert code == 0, out
    count = 0
    for line in out.decode().splitlines()[1:]:
        fields = line.split()
        if len(fields) > 3 and fields[2].endswith(":" + UPSTREAM_PORT) and fields[3] == ESTABLISHED:
            count += 1
    return count


def _rss_kib(gateway, pid: int) -> int:
    code, out = gateway.exec_run(["cat", f"/proc/{pid}/status"])
    assert code == 0, out
    line = next(x for x in out.decode().splitlines() if x.startswith("VmRSS:"))
    return int(line.split()[1])


def _sim_gpu_memory(container) -> tuple[float, ...]:
    """The simulator's `sim:gpu_memory_used_bytes` per GPU, read inside the container."""
    script = (
        "import urllib.request;"
        "print(urllib.request.urlopen('http://127.0.0.1:8000/metrics', timeout=10).read().decode())"
    )
    code, out = container.exec_run(["python3", "-c", script])
    assert code == 0, out
    return tuple(
        float(line.split()[-1])
        for line in out.decode().splitlines()
        if line.startswith("sim:gpu_memory_used_bytes")
    )


def test_many_sleep_standby_switches_grow_nothing(sim_stack, docker_client, monkeypatch) -> None:
    stack = _in_process_stack(sim_stack, monkeypatch)
    options = UpOptions(timeout=120, settle=0.0, poll_interval=0.05)
    selector = {"label": f"com.docker.compose.project={stack.project}"}
    variants = {"label": [f"com.docker.compose.project={stack.project}", "vllm-composer.variant"]}
    for variant in ("mtp", "baseline"):  # two cold starts: one serves, one sleeps
        up_set(stack, [variant], client=docker_client, options=options)
    gateway = gateway_container(stack, docker_client)
    control = GatewayControl(gateway)
    routes_before = control.state().raw["routes_total"]
    samples: list[dict] = []
    memory: dict[tuple[str, str], set[tuple[float, ...]]] = {}
    began = time.monotonic()
    for switch in range(SWITCHES):
        variant = ("mtp", "baseline")[switch % 2]
        result = up_set(stack, [variant], client=docker_client, options=options)
        assert result.outcome == "woke", (switch, result)
        containers = docker_client.containers.list(all=True, filters=selector)
        assert len(containers) == 4, (
            switch,
            [c.name for c in containers],
        )  # two variants, gateway, port holder
        state = control.state()
        assert (state.held, state.inflight, len(state.holds)) == (0, 0, 0), (switch, state)
        snap = take(stack, docker_client)
        asleep = [m.variant for m in snap.asleep]
        assert asleep == [("baseline", "mtp")[switch % 2]], (switch, asleep)
        plan = standby.plan_for(stack, variant, asleep)
        assert plan.fits and len(plan.costs) == 1, (switch, plan)
        if switch % SAMPLE_EVERY == 0 or switch == SWITCHES - 1:
            serving = snap.current
            assert serving is not None and serving.variant == variant
            for c in docker_client.containers.list(filters=variants):
                role = "awake" if c.name == serving.name else "asleep"
                memory.setdefault((c.labels["vllm-composer.variant"], role), set()).add(_sim_gpu_memory(c))
            samples.append(
                {
                    "switch": switch,
                    "connections": _upstream_connections(gateway),
                    "rss_kib": _rss_kib(gateway, int(state.raw["pid"])),
                    "seconds": round(time.monotonic() - began, 1),
                }
            )
    took = time.monotonic() - began
    print(f"{SWITCHES} switches in {took:.0f}s ({took / SWITCHES:.2f}s each); samples: {samples}")
    assert control.state().raw["routes_total"] - routes_before == SWITCHES  # one route per wake
    # the simulator's GPU accounting: the same figures every time a variant is awake or asleep
    assert all(len(seen) == 1 for seen in memory.values()), memory
    awake_mtp, asleep_mtp = memory[("mtp", "awake")], memory[("mtp", "asleep")]
    assert next(iter(asleep_mtp))[0] < next(iter(awake_mtp))[0]
    first, last = samples[0], samples[-1]
    assert max(s["connections"] for s in samples) <= first["connections"] + 4, samples
    assert last["connections"] <= first["connections"] + 2, samples
    assert last["rss_kib"] - samples[min(1, len(samples) - 1)]["rss_kib"] < 8 * 1024, samples
