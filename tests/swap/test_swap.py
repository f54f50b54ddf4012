"""Swaps against the real daemon with the simulator: success, failures, rollback."""

from __future__ import annotations

import json

import httpx
import pytest

from tests.swap.conftest import running_containers

pytestmark = pytest.mark.docker


def assert_serving(stack, client, variant: str) -> None:
    """Exactly one container runs, it is `variant`, ready on the shared port and name."""
    running = running_containers(client, stack.project)
    assert [c.labels["vllm-composer.variant"] for c in running] == [variant]
    headers = {"Authorization": f"Bearer {stack.api_key}"}
    models = httpx.get(f"http://127.0.0.1:{stack.port}/v1/models", headers=headers, timeout=5)
    assert models.status_code == 200
    assert [m["id"] for m in models.json()["data"]] == ["claude-opus-5"]
    assert httpx.get(f"http://127.0.0.1:{stack.port}/health", timeout=5).status_code == 200
    status = stack.status()
    assert status["variant"] == variant and status["health"] == "ready"
    assert status["port"] == stack.port


def spec_counters(url: str) -> dict[str, float]:
    """The spec-decode and generation counters from /metrics, summed over labels."""
    totals: dict[str, float] = {}
    for line in httpx.get(f"{url}/metrics", timeout=5).text.splitlines():
        if line.startswith(("vllm:spec_decode", "vllm:generation_tokens_total")):
            name, value = line.rsplit(" ", 1)
            if not name.split("{")[0].endswith("_total"):
                continue  # `_created` samples are timestamps (prometheus_client, like vLLM)
            key = name if "per_pos" in name else name.split("{")[0]
            totals[key] = totals.get(key, 0.0) + float(value)
    return totals


def assert_api_surface(stack, speculative: bool) -> None:
    """Wrong key 401; streaming yields tokens and [DONE]; spec-decode counters add up."""
    url = f"http://127.0.0.1:{stack.port}"
    wrong = httpx.get(f"{url}/v1/models", headers={"Authorization": "Bearer wrong"}, timeout=5)
    assert wrong.status_code == 401 and wrong.json()["error"]["message"].startswith("Unauthorized")
    before = spec_counters(url)
    body = {
        "model": "claude-opus-5",
        "messages": [{"role": "user", "content": "Tell me about speculative decoding."}],
        "max_tokens": 64,
        "temperature": 0,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    headers = {"Authorization": f"Bearer {stack.api_key}"}
    with httpx.stream(
        "POST", f"{url}/v1/chat/completions", json=body, headers=headers, timeout=60
    ) as response:
        lines = [line for line in response.iter_lines() if line.startswith("data: ")]
    assert lines[-1] == "data: [DONE]"
    usage = json.loads(lines[-2][len("data: ") :])["usage"]
    assert usage["completion_tokens"] == 64
    delta = {k: v - before.get(k, 0.0) for k, v in spec_counters(url).items()}
    assert delta["vllm:generation_tokens_total"] == 64
    if not speculative:
        assert not any(k.startswith("vllm:spec_decode") for k in delta)
        return
    drafts = delta["vllm:spec_decode_num_drafts_total"]
    accepted = delta["vllm:spec_decode_num_accepted_tokens_total"]
    assert accepted <= delta["vllm:spec_decode_num_draft_tokens_total"]
    assert 1 + accepted + drafts == 64
    positions = {int(k.split('position="')[1].split('"')[0]): v for k, v in delta.items() if "per_pos" in k}
    per_pos = [positions[i] for i in sorted(positions)]
    assert len(per_pos) == 7 and per_pos == sorted(per_pos, reverse=True) and sum(per_pos) == accepted


def test_baseline_mtp_dflash2_baseline(sim_stack, docker_client):
    previous = None
    for variant in ("baseline", "mtp", "dflash2", "baseline"):
        done = sim_stack.run("up", variant, "--json")
        assert done.returncode == 0, done.stderr
        result = json.loads(done.stdout)
        assert result["variant"] == variant and result["previous"] == previous
        assert result["outcome"] == ("swapped" if previous else "started")
        expected = {"start_to_ready", "settle", "total", "drain", "warmup", "release"}  # behind the gateway
        expected |= {"stop", "release_wait"} if previous else set()
        assert set(result["timings"]) == expected
        assert result["timings"]["total"] >= result["timings"]["start_to_ready"] > 0
        assert result["kv_cache_tokens"] > 0
        previous = variant
        assert_serving(sim_stack, docker_client, variant)
        assert_api_surface(sim_stack, speculative=variant != "baseline")


def test_same_variant_again_is_a_no_op(sim_stack, docker_client):
    assert sim_stack.run("up", "mtp").returncode == 0
    first = running_containers(docker_client, sim_stack.project)[0].id
    again = sim_stack.run("up", "mtp", "--json")
    assert again.returncode == 0
    assert '"outcome": "unchanged"' in again.stdout
    assert running_containers(docker_client, sim_stack.project)[0].id == first


@pytest.mark.parametrize(
    ("variant", "extra", "cause"),
    [
        ("mtp-crash", [], "exited with code"),
        ("mtp-hang", ["--timeout", "3"], "not ready after"),
        ("mtp-late-crash", [], "after becoming ready"),
        ("wrong-name", [], "not the expected name 'claude-opus-5'"),
    ],
)
def test_failure_rolls_back_to_previous(sim_stack, docker_client, variant, extra, cause):
    assert sim_stack.run("up", "baseline").returncode == 0
    done = sim_stack.run("up", variant, *extra)
    assert done.returncode == 1
    last = done.stderr.strip().splitlines()[-1]
    assert cause in last and "rolled back to baseline" in last
    assert_serving(sim_stack, docker_client, "baseline")


def test_crash_prints_log_tail_and_hint(sim_stack):
    stack_file = sim_stack.stack_file
    stack_file.write_text(
        stack_file.read_text()
        + '\n[variants.no-cache]\nextends = "mtp"\nenv = { SIM_FAIL = "no-kv-memory" }\n'
    )
    done = sim_stack.run("up", "no-cache")
    assert done.returncode == 1
    assert "No available memory for the cache blocks" in done.stderr
    assert "hint: After loading the weights no GPU memory is left" in done.stderr
    assert "nothing is running" in done.stderr


def test_failure_without_previous_leaves_nothing_running(sim_stack, docker_client):
    done = sim_stack.run("up", "mtp-crash")
    assert done.returncode == 1
    assert "nothing is running" in done.stderr
    assert running_containers(docker_client, sim_stack.project) == []
    assert sim_stack.status()["running"] is False


def test_port_held_by_foreign_process_changes_nothing(sim_stack, docker_client):
    import socket

    assert sim_stack.run("up", "baseline").returncode == 0
    with socket.socket() as foreign:
        foreign.bind(("127.0.0.1", 0))
        foreign.listen()
        port = foreign.getsockname()[1]
        done = sim_stack.run("--set", f"stack.port={port}", "up", "mtp")
    assert done.returncode == 1
    assert f"port {port} on 127.0.0.1 is in use by a process that is not ours" in done.stderr
    assert_serving(sim_stack, docker_client, "baseline")


def test_missing_image_fails_preflight(sim_stack, docker_client):
    assert sim_stack.run("up", "baseline").returncode == 0
    done = sim_stack.run("--set", "images.vllm=vllm-sim:does-not-exist", "up", "mtp")
    assert done.returncode == 1
    assert "image vllm-sim:does-not-exist is not present locally" in done.stderr
    assert_serving(sim_stack, docker_client, "baseline")


def test_weak_key_refused_unless_allowed(sim_stack):
    sim_stack.env["VLLM_API_KEY"] = "sk-123456"
    refused = sim_stack.run("up", "baseline")
    assert refused.returncode == 2 and "too easy to guess" in refused.stderr
    assert len(refused.stderr.splitlines()) == 1 and "sk-123456" not in refused.stderr
    allowed = sim_stack.run("up", "baseline", "--allow-weak-key")
    assert allowed.returncode == 0, allowed.stderr
    assert "too easy to guess" in allowed.stderr, "a weak key accepted is still a warning"


def test_workload_maps_to_variant(sim_stack, docker_client):
    done = sim_stack.run("use", "chat-1")
    assert done.returncode == 0, done.stderr
    assert_serving(sim_stack, docker_client, "mtp")
    unknown = sim_stack.run("use", "nope")
    assert unknown.returncode == 2 and "choose one of chat-1, long-16" in unknown.stderr


def test_down_stops_everything(sim_stack, docker_client):
    assert sim_stack.run("up", "baseline").returncode == 0
    done = sim_stack.run("down")
    assert done.returncode == 0 and "stopped baseline" in done.stdout
    assert running_containers(docker_client, sim_stack.project) == []


def test_api_key_never_shown(sim_stack, docker_client):
    up = sim_stack.run("up", "mtp", "--json")
    failed = sim_stack.run("up", "mtp-crash", "--json")
    status_text = sim_stack.run("status")
    status_json = sim_stack.run("status", "--json")
    logs = sim_stack.run("logs", "--explain")
    config = sim_stack.run("config", "--json")
    for done in (up, failed, status_text, status_json, logs, config):
        assert sim_stack.api_key not in done.stdout + done.stderr
    for container in running_containers(docker_client, sim_stack.project):
        assert sim_stack.api_key not in str(container.labels)
        assert sim_stack.api_key not in " ".join(container.attrs["Config"]["Cmd"])


def test_logs_explain_on_a_clean_log(sim_stack):
    assert sim_stack.run("up", "baseline").returncode == 0
    done = sim_stack.run("logs", "--explain")
    assert done.returncode == 0 and "no known failure signature" in done.stdout
    plain = sim_stack.run("logs", "--tail", "50")
    assert "Application startup complete." in plain.stdout


def test_fa3_failure_names_the_fix(sim_stack):
    sim_stack.stack_file.write_text(
        sim_stack.stack_file.read_text() + '\n[variants.fa3]\nextends = "baseline"\n'
        'env = { VLLM_FLASH_ATTN_VERSION = "3" }\n'
    )
    done = sim_stack.run("up", "fa3", "--no-rollback")
    assert done.returncode == 1
    assert "hint: FlashAttention 3 is Hopper-only" in done.stderr
