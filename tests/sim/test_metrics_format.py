"""The /metrics text matches prometheus_client's exposition, which real vLLM serves."""

from __future__ import annotations

import re

from vllm.sim.metrics import Metrics, go_float

# prometheus_client 0.26.0 generate_latest() for a counter and a histogram with vLLM's label
# names; only the _created timestamps are replaced by CREATED.
PROMETHEUS_CLIENT_TEXT = """\
# HELP vllm:prompt_tokens_total Number of prefill tokens processed.
# TYPE vllm:prompt_tokens_total counter
vllm:prompt_tokens_total{engine="0",model_name="qwen"} 1.234567e+06
# HELP vllm:prompt_tokens_created Number of prefill tokens processed.
# TYPE vllm:prompt_tokens_created gauge
vllm:prompt_tokens_created{engine="0",model_name="qwen"} CREATED
# HELP vllm:e2e_request_latency_seconds Histogram of e2e request latency in seconds.
# TYPE vllm:e2e_request_latency_seconds histogram
vllm:e2e_request_latency_seconds_bucket{engine="0",le="0.3",model_name="qwen"} 0.0
vllm:e2e_request_latency_seconds_bucket{engine="0",le="0.5",model_name="qwen"} 1.0
"""


def rendered() -> str:
    metrics = Metrics("qwen", 3)
    metrics.prompt_tokens = 1_234_567
    metrics.e2e.observe(0.4)
    metrics.finished["stop"] = 2
    metrics.accepted_per_pos = [3, 2, 1]
    return metrics.render()


def test_counter_and_histogram_lines_match_prometheus_client() -> None:
    text = re.sub(r"(_created\{[^}]*\}) \S+", r"\1 CREATED", rendered())
    lines = text.splitlines()
    for expected in PROMETHEUS_CLIENT_TEXT.splitlines():
        assert expected in lines, expected


def test_every_counter_and_histogram_has_created_samples() -> None:
    text = rendered()
    types = dict(re.findall(r"^# TYPE (\S+) (\S+)$", text, re.M))
    samples = [line for line in text.splitlines() if line and not line.startswith("#")]
    counters = [name for name, kind in types.items() if kind == "counter"]
    histograms = [name for name, kind in types.items() if kind == "histogram"]
    assert "vllm:request_success_total" in counters and "vllm:spec_decode_num_drafts_total" in counters
    for name in counters:
        assert name.endswith("_total")
        created = name.removesuffix("_total") + "_created"
        assert types[created] == "gauge"
        series = [s.split(" ")[0].replace("_total{", "{") for s in samples if s.startswith(name + "{")]
        assert [
            s.split(" ")[0].replace("_created{", "{") for s in samples if s.startswith(created + "{")
        ] == series
    for name in histograms:
        assert types[name + "_created"] == "gauge"
    stamps = [float(s.rsplit(" ", 1)[1]) for s in samples if "_created{" in s]
    assert stamps and all(1.6e9 < stamp < 4e9 for stamp in stamps)


def test_labels_are_sorted_and_values_go_formatted() -> None:
    text = rendered()
    for line in text.splitlines():
        if line.startswith("#") or "{" not in line:
            continue
        keys = re.findall(r'(\w+)="', line.split("}")[0])
        assert keys == sorted(keys), line
    assert 'vllm:request_success_total{engine="0",finished_reason="stop",model_name="qwen"} 2.0' in text
    assert 'position="2"} 1.0' in text
    assert [go_float(v) for v in (0, 1.5, 1234567, 1_700_000_000.25, float("inf"))] == [
        "0.0",
        "1.5",
        "1.234567e+06",
        "1.70000000025e+09",
        "+Inf",
    ]
