"""`compose-spec bench` on the real Docker engine with the simulator images.

The simulator's own timing model (images/sim/src/vllm/sim/timing.py) is the truth the
measurements are compared with. Time runs SIM_TIME_SCALE times faster in the containers,
so measured rates are divided by it before the comparison.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.conftest import COMPOSE_SPEC, free_port

REPO = Path(__file__).resolve().parents[2]
SIM_SRC = REPO / "images" / "sim" / "src"
DRAFT_BLOCK_SIZE = 8  # images/sim/models/Qwen3.8-27B-DFlash2/config.json
TOLERANCE = 0.03

pytestmark = [pytest.mark.docker, pytest.mark.timing]  # real-time rates: run alone


def sim_truth():
    """The simulator's timing model and profiles (stdlib-only modules)."""
    if str(SIM_SRC) not in sys.path:
        sys.path.insert(0, str(SIM_SRC))
    from vllm.sim import profiles, timing

    return timing, profiles


@dataclass
class Stack:
    """One isolated stack: project, port, env, extra stack file."""

    project: str
    port: int
    env: dict[str, str]
    extra: Path
    out: Path

    def argv(self, *args: str) -> list[str]:
        return [
            *COMPOSE_SPEC,
            "--env-file",
            ".env.demo",
            "--stack",
            "composer.toml",
            "--stack",
            str(self.extra),
            "--set",
            f"stack.project={self.project}",
            "--set",
            f"stack.port={self.port}",
            "--set",
            "stack.probation=0s",
            *args,
        ]

    def run(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        argv = self.argv(*args)
        done = subprocess.run(argv, cwd=REPO, env=self.env, capture_output=True, text=True, timeout=300)
        if check and done.returncode != 0:
            command = " ".join(args)
            raise AssertionError(f"{command} failed ({done.returncode}):\n{done.stdout}\n{done.stderr}")
        return done

    def running(self, docker_client) -> list[dict[str, str]]:
        containers = docker_client.containers.list(
            filters={"label": ["vllm-composer.variant", f"com.docker.compose.project={self.project}"]}
        )
        return [c.labels for c in containers]


def _cleanup(docker_client, project: str) -> None:
    filters = {"label": [f"com.docker.compose.project={project}"]}  # the variant and the gateway
    for container in docker_client.containers.list(all=True, filters=filters):
        container.remove(force=True)
    for network in docker_client.networks.list(filters={"label": f"com.docker.compose.project={project}"}):
        network.remove()


@pytest.fixture
def make_stack(tmp_path: Path, docker_client) -> Iterator:
    projects: list[str] = []

    def make(sim_env: dict[str, str]) -> Stack:
        project = f"vctbench{uuid.uuid4().hex[:8]}"
        projects.append(project)
        extra = tmp_path / f"{project}.toml"
        extra.write_text("[stack.env]\n" + "".join(f'{k} = "{v}"\n' for k, v in sim_env.items()))
        env = {
            k: v
            for k, v in os.environ.items()
            if not k.startswith(("SIM_", "VLLM_", "COMPOSE_"))
            and not k.endswith("_IMAGE")
            and k not in {"NUM_SPECULATIVE_TOKENS", "KV_CACHE_MEMORY", "COMPOSER_STACK"}
        }
        env["VLLM_API_KEY"] = f"sk-bench-{uuid.uuid4().hex}"
        env["XDG_STATE_HOME"] = str(tmp_path / "state")
        return Stack(project, free_port(), env, extra, tmp_path / f"{project}-out")

    yield make
    for project in projects:
        _cleanup(docker_client, project)


def test_sweep_matches_the_simulator_and_restores_the_previous_variant(make_stack, docker_client) -> None:
    timing, profiles = sim_truth()
    profile = profiles.get_profile("qwen3.8-27b")
    # about 2 s of decode per request: ms jitter stays far below 3%, and the stack's own cost
    # per streamed event (client, gateway and simulator share 2 cores) stays below 2% at MTP K=7
    # (20x, 250 events/s, measured mtp 3.8% and 2.9% slow where baseline was exact)
    scale = 10.0
    stack = make_stack({"SIM_TIME_SCALE": str(scale), "SIM_LOAD_SECONDS": "0.2"})
    stack.run("up", "mtp")
    (before,) = stack.running(docker_client)

    done = stack.run(
        "bench",
        "--variants",
        "baseline,mtp,dflash2",
        "--k",
        "3,7,10",
        "--max-tokens",
        "1000",
        "--runs",
        "3",
        "--warmup",
        "1",
        "--timeout",
        "120",
        "--json",
        "--out",
        str(stack.out),
    )
    report = json.loads(done.stdout)
    points = {(p["variant"], p["k"]): p for p in report["points"]}
    swept = [(v, k) for v in ("mtp", "dflash2") for k in (3, 7, 10)]
    assert sorted(points) == sorted([("baseline", 0), *swept])
    # K=10 drafts past the draft's trained block (block_size 8): up refuses it, so it is skipped
    assert points.pop(("dflash2", 10))["error"].startswith("skipped: K=10 exceeds the draft's trained block")
    for (variant, k), point in points.items():
        method = {"baseline": None, "mtp": "mtp", "dflash2": "dflash"}[variant]
        block = DRAFT_BLOCK_SIZE if method == "dflash" else None
        expected_rate = timing.decode_tok_s(profile, method, k, block)
        expected_tpi = timing.tokens_per_iteration(profile, method, k, block)
        measured_rate = point["decode_tok_s"] / scale
        print(f"{variant} K={k}: {measured_rate:.2f} tok/s, truth {expected_rate:.2f}")
        assert measured_rate == pytest.approx(expected_rate, rel=TOLERANCE), (variant, k)
        assert point["tokens_per_iteration"] == pytest.approx(expected_tpi, rel=TOLERANCE), (variant, k)
        if method:
            expected_pos = timing.acceptance(profile, method, k, block)
            assert len(point["per_position"]) == k
            for measured, truth in zip(point["per_position"], expected_pos, strict=True):
                assert measured == pytest.approx(truth, abs=0.03), (variant, k, point["per_position"])
            assert point["acceptance_rate"] == pytest.approx(sum(expected_pos) / k, abs=0.03)
        assert point["deterministic"] is True
        assert point["agreement_percent"] == (100.0 if method else None)  # baseline is the reference
        assert point["ttft_s"] > 0 and point["e2e_s"] > point["ttft_s"]
        assert len(point["runs"]) == 3 and all(r["completion_tokens"] == 1000 for r in point["runs"])
    assert report["best_k"] == {"mtp": 7, "dflash2": 7}
    assert any("block_size 8" in h for h in report["hints"])
    assert points[("mtp", 7)]["speedup"] == pytest.approx(59.2 / 29.4, rel=2 * TOLERANCE)

    (after,) = stack.running(docker_client)
    assert after["vllm-composer.variant"] == "mtp"
    assert after["vllm-composer.config-hash"] == before["vllm-composer.config-hash"]
    assert (stack.out / "bench.json").is_file() and (stack.out / "bench.csv").is_file()
    assert "[6/7] dflash2 K=7: run 3/3" in done.stderr and "left" in done.stderr
    assert "mtp serves again" in done.stderr


def test_small_model_prefers_k1_and_flipped_tokens_lower_agreement(make_stack, docker_client) -> None:
    scale = 10.0
    stack = make_stack(
        {
            "SIM_TIME_SCALE": str(scale),
            "SIM_LOAD_SECONDS": "0.2",
            "SIM_PROFILE": "qwen3.5-2b",
            "SIM_FLIP_RATE": "0.01",
        }
    )
    assert stack.running(docker_client) == []
    done = stack.run(
        "bench",
        "--variants",
        "baseline,mtp",
        "--k",
        "1,3,5",
        "--max-tokens",
        "600",
        "--runs",
        "3",
        "--warmup",
        "1",
        "--timeout",
        "120",
        "--out",
        str(stack.out),
    )
    assert "best K for mtp: 1 at" in done.stdout
    report = json.loads((stack.out / "bench.json").read_text())
    assert report["best_k"] == {"mtp": 1}
    points = {(p["variant"], p["k"]): p for p in report["points"]}
    assert points[("baseline", 0)]["agreement_percent"] is None  # the reference
    assert points[("baseline", 0)]["deterministic"] is True
    assert "ref" in done.stdout.splitlines()[1]
    for k in (1, 3, 5):
        point = points[("mtp", k)]
        assert point["deterministic"] is True  # flips are reproducible, like a numerics difference
        assert 90.0 < point["agreement_percent"] < 100.0
        assert point["first_difference"] is not None
    assert points[("mtp", 1)]["speedup"] > 1.05 > points[("mtp", 5)]["speedup"]
    assert stack.running(docker_client) == []  # nothing served before, so nothing serves after


def test_sigterm_mid_sweep_still_restores_the_previous_variant(make_stack, docker_client) -> None:
    stack = make_stack({"SIM_TIME_SCALE": "20", "SIM_LOAD_SECONDS": "0.2"})
    stack.run("up", "baseline")
    (before,) = stack.running(docker_client)
    args = ("bench", "--variants", "mtp", "--k", "3,7", "--max-tokens", "1000", "--out", str(stack.out))
    proc = subprocess.Popen(stack.argv(*args), cwd=REPO, env=stack.env, stderr=subprocess.PIPE, text=True)
    seen: list[str] = []
    try:
        for line in proc.stderr:
            seen.append(line)
            if "mtp K=3: run 1/5" in line:
                proc.send_signal(signal.SIGTERM)
                break
        _, rest = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    output = "".join(seen) + (rest or "")
    assert proc.returncode == 130, output
    assert output.count("baseline serves again") == 1 and "rolling back" not in output  # restored once
    (after,) = stack.running(docker_client)
    assert after["vllm-composer.variant"] == "baseline"
    assert after["vllm-composer.config-hash"] == before["vllm-composer.config-hash"]
    assert "Aborted!" not in output and "Traceback" not in output
    # What was measured is written; the point cut short is not (no partial garbage).
    report = json.loads((stack.out / "bench.json").read_text())
    assert report["interrupted"] == "interrupted at mtp K=3" and report["points"] == []
    assert "interrupted at mtp K=3: wrote the 0 point(s) measured so far" in output


def test_concurrency_sweep_reproduces_the_crossover_and_recommend_follows_it(
    make_stack, docker_client
) -> None:
    """MTP K=7 beats the baseline at 1 stream and loses at 16 (the simulator's batching model),
    and `recommend` turns that into chat-1 = mtp, chat-16 = baseline."""
    if str(SIM_SRC) not in sys.path:
        sys.path.insert(0, str(SIM_SRC))
    from vllm.sim import batching, profiles

    profile = profiles.get_profile("qwen3.8-27b")
    scale = 4.0  # slow enough that 16 streams of SSE parsing on a small host do not cap the client
    stack = make_stack({"SIM_TIME_SCALE": str(scale), "SIM_LOAD_SECONDS": "0.2"})
    args = ["--variants", "baseline,mtp", "--k", "7", "--concurrency", "1,16", "--prompt-tokens", "128"]
    args += ["--max-tokens", "100", "--runs", "2", "--warmup", "1", "--timeout", "120"]
    done = stack.run("bench", *args, "--json", "--out", str(stack.out))
    report = json.loads(done.stdout)
    assert report["options"]["concurrency"] == [1, 16] and report["options"]["prompt_tokens"] == [128]
    points = {(p["variant"], p["concurrency"]): p for p in report["points"]}
    assert sorted(points) == [("baseline", 1), ("baseline", 16), ("mtp", 1), ("mtp", 16)]
    for (variant, streams), point in points.items():
        method, k = (None, 0) if variant == "baseline" else ("mtp", 7)
        truth = batching.aggregate_tok_s(profile, method, k, streams)
        measured = point["aggregate_tok_s"] / scale
        print(f"{variant} x{streams}: {measured:.1f} tok/s in all, model {truth:.1f}")
        # Below the model's steady state (TTFT and the last steps are in the window), never above.
        assert 0.7 * truth < measured < 1.05 * truth, (variant, streams)
        assert len(point["runs"]) == 2 * streams and point["prompt_tokens"] == 128
        assert all(r["prompt_tokens"] >= 128 for r in point["runs"])
        assert point["ttft_p95_s"] >= point["ttft_s"] > 0 and point["e2e_p95_s"] >= point["e2e_s"]
        assert point["deterministic"] is True
    mtp1, mtp16 = points[("mtp", 1)], points[("mtp", 16)]
    assert mtp1["aggregate_speedup"] > 1.5  # the model says 2.01x
    assert mtp16["aggregate_speedup"] < 0.9  # the model says 0.73x
    assert mtp1["tokens_per_iteration"] == pytest.approx(4.82, rel=0.05)
    assert mtp16["agreement_percent"] == 100.0  # batching changes no output
    assert (stack.out / "bench.csv").read_text().count("\n") == 5

    shown = stack.run("recommend", "--from", str(stack.out / "bench.json"), "--json")
    wins = {w["workload"]: w for w in json.loads(shown.stdout)["workloads"]}
    assert (wins["chat-1"]["variant"], wins["chat-1"]["k"]) == ("mtp", 7)
    assert wins["chat-16"]["variant"] == "baseline"
    assert wins["chat-1"]["over_baseline"] == pytest.approx(mtp1["aggregate_speedup"], rel=0.01)
    print("crossover:", {name: (w["variant"], w["margin"]) for name, w in wins.items()})
