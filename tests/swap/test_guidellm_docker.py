"""A load generator nobody here wrote drives the gateway across three switches (real daemon,
simulator): guidellm 0.8.1 (`make guidellm`: a virtualenv of its own under .composer/) sends
a constant rate of short streamed chat requests of synthetic text to the shared port with the
API key while `up mtp`, `up baseline` and `up mtp` switch the variant, as a user types them.
Its own JSON report must count no errored and no incomplete request, and requests it counts
as successful must have been in flight through each switch and finished after the last.

guidellm counts tokens with a local tokenizer (the byte-level BPE of the tiny checkpoints,
trained here by images/vllm-cpu/make_models.py) and runs with the hub offline: nothing is
downloaded at run time."""

from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path

import httpx
import pytest

from tests.conftest import REPO

pytestmark = pytest.mark.docker

GUIDELLM_VENV = REPO / ".composer" / "guidellm-venv"
SWITCHES = ("mtp", "baseline", "mtp")
RATE = 4  # requests a second
REQUESTS = 200  # guidellm's own limit: 50 s at RATE (three switches take about 13 s on 2 cores)
PROMPT_TOKENS = 32
OUTPUT_TOKENS = 24
SERVED = "claude-opus-5"


@pytest.fixture(scope="module")
def guidellm() -> Path:
    """guidellm's executable: `make guidellm` (which make test runs first) makes its
    virtualenv once, in 1.5 to 3 minutes; run here only where it is missing (make would also
    bring the running .venv up to date)."""
    executable = GUIDELLM_VENV / "bin" / "guidellm"
    if not executable.exists():
        done = subprocess.run(
            ["make", "--no-print-directory", "guidellm"],
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=900,
        )
        assert done.returncode == 0, done.stdout + done.stderr
    return executable


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory) -> Path:
    """The tiny checkpoints' tokenizer, trained locally in guidellm's virtualenv (it has
    transformers and tokenizers), saved where AutoTokenizer loads it without a hub."""
    folder = tmp_path_factory.mktemp("tokenizer")
    script = (
        "import sys; sys.path.insert(0, sys.argv[1]); import make_models; "
        "make_models.train_tokenizer(0).save_pretrained(sys.argv[2])"
    )
    python = str(GUIDELLM_VENV / "bin" / "python")
    done = subprocess.run(
        [python, "-c", script, str(REPO / "images" / "vllm-cpu"), str(folder)],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"},
    )
    assert done.returncode == 0, done.stderr
    return folder


def _scenario(stack, tokenizer: Path, report: Path) -> dict:
    """guidellm's run, as a scenario file holds it (the API key comes from the environment)."""
    return {
        "spec": {
            "backend": {
                "kind": "openai_http",
                "target": f"http://127.0.0.1:{stack.port}",
                "model": SERVED,
                "request_format": "/v1/chat/completions",
                "timeout": 120,
                "http2": False,
            },
            "profile": {"kind": "constant", "rate": [RATE]},
            # max_requests ends when the last one has finished (max_duration would cancel those
            # in flight at its end, and guidellm would count them incomplete)
            "constraints": [{"kind": "max_requests", "count": REQUESTS}],
            "tokenizer": {"kind": "huggingface_auto", "model": str(tokenizer)},
            "data": [
                {
                    "kind": "synthetic_text",
                    "prompt_tokens": PROMPT_TOKENS,
                    "output_tokens": OUTPUT_TOKENS,
                }
            ],
            "outputs": [{"kind": "json", "path": str(report)}],
        }
    }


def test_guidellm_counts_no_failed_request_across_three_switches(sim_stack, guidellm, tokenizer, tmp_path):
    assert sim_stack.run("up", "baseline").returncode == 0
    report = tmp_path / "guidellm.json"
    scenario = tmp_path / "scenario.json"
    scenario.write_text(json.dumps(_scenario(sim_stack, tokenizer, report)), encoding="utf-8")
    env = {  # guidellm reads GUIDELLM__* settings: none from the user's shell
        **{k: v for k, v in sim_stack.env.items() if not k.startswith("GUIDELLM_")},
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
        "HF_HOME": str(tmp_path / "hf"),
        "TOKENIZERS_PARALLELISM": "false",
        "GUIDELLM__MAX_WORKER_PROCESSES": "1",  # one async worker is plenty; each imports torch
        "GUIDELLM__SPEC__BACKEND__API_KEY": sim_stack.api_key,
    }
    log = (tmp_path / "guidellm.log").open("w")
    before = _finished(sim_stack)
    load = subprocess.Popen(
        [str(guidellm), "run", "--scenario", str(scenario), "--disable-progress"],
        stdout=log,
        stderr=subprocess.STDOUT,
        env=env,
        cwd=tmp_path,
    )
    switches: list[tuple[float, float]] = []
    try:
        _wait_served(sim_stack, load, before)
        for variant in SWITCHES:
            began = time.time()
            done = sim_stack.run("up", variant, timeout=180)
            assert done.returncode == 0, done.stderr
            switches.append((began, time.time()))
        took = [round(ended - began, 1) for began, ended in switches]
        assert load.poll() is None, f"guidellm ended before the third switch did ({took} s): raise REQUESTS"
        assert load.wait(timeout=REQUESTS / RATE + 120) == 0, (tmp_path / "guidellm.log").read_text()
    finally:
        if load.poll() is None:
            load.kill()
            load.wait()
        log.close()
    text = report.read_text()
    assert sim_stack.api_key not in text and sim_stack.api_key not in (tmp_path / "guidellm.log").read_text()
    (benchmark,) = json.loads(text)["benchmarks"]
    totals = benchmark["metrics"]["request_totals"]
    assert totals["errored"] == 0 and totals["incomplete"] == 0, totals
    successful = benchmark["requests"]["successful"]
    assert totals["successful"] == REQUESTS == len(successful)
    spans = [_span(request) for request in successful]
    for began, ended in switches:  # each switch had requests in flight that then completed
        assert any(start < ended and end > began for start, end in spans), (began, ended)
    assert any(start > switches[-1][1] for start, _ in spans)  # and the last variant serves


def _finished(stack) -> float:
    """The requests the serving variant has finished: vLLM's counter (the simulator's), read
    through the shared port (`/metrics` is one of its open routes)."""
    lines = httpx.get(f"http://127.0.0.1:{stack.port}/metrics", timeout=10).text.splitlines()
    return sum(float(line.split()[-1]) for line in lines if line.startswith("vllm:request_success_total"))


def _wait_served(stack, load: subprocess.Popen, before: float) -> None:
    """Wait until the serving variant has finished guidellm's first requests (its workers
    take seconds to start, more on a busy machine)."""
    deadline = time.monotonic() + 120
    while _finished(stack) < before + 2 * RATE:
        assert load.poll() is None, "guidellm ended before it sent a request"
        assert time.monotonic() < deadline, "guidellm's requests never reached the variant"
        time.sleep(0.5)


def _span(request: dict) -> tuple[float, float]:
    """When guidellm sent a request and when its last token came (its own timings)."""
    timings = request["info"]["timings"]
    return timings["request_start"], timings["request_end"]
