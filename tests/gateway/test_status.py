"""The status builder: vLLM metrics text -> per-variant rates, the switch log's stages and
outcomes, and /gateway/status and /gateway/ui on an in-process gateway (key, no leaks)."""

from __future__ import annotations

import httpx
import pytest

from composer.gateway.control.switchlog import GATEWAY_UPDATED, SwitchLog
from composer.gateway.host.client import GatewayControl
from composer.gateway.status.page import PAGE
from composer.gateway.status.throughput import Samples, parse
from composer.gateway.status.view import plain_error

from .conftest import KEY
from .fakes import LocalExec


def vllm_text(generation: float, drafts: float = 0, draft_tokens: float = 0, accepted: float = 0) -> str:
    """vLLM 0.33-shaped metrics: two engines, spec-decode counters, a histogram to skip."""
    per_engine = []
    for engine in ("0", "1"):
        labels = f'engine="{engine}",model_name="q"'
        per_engine += [
            f"vllm:generation_tokens_total{{{labels}}} {generation / 2}",
            f"vllm:prompt_tokens_total{{{labels}}} 100.0",
            f"vllm:spec_decode_num_drafts_total{{{labels}}} {drafts / 2}",
            f"vllm:spec_decode_num_draft_tokens_total{{{labels}}} {draft_tokens / 2}",
            f"vllm:spec_decode_num_accepted_tokens_total{{{labels}}} {accepted / 2}",
            f'vllm:spec_decode_num_accepted_tokens_per_pos_total{{{labels},position="0"}} {drafts / 2 * 0.8}',
            f'vllm:spec_decode_num_accepted_tokens_per_pos_total{{{labels},position="1"}} {drafts / 2 * 0.5}',
            f"vllm:kv_cache_usage_perc{{{labels}}} {0.25 if engine == '0' else 0.5}",
            f"vllm:num_requests_running{{{labels}}} 2.0",
            f'vllm:time_to_first_token_seconds_bucket{{{labels},le="0.1"}} 3.0',
        ]
    return "\n".join(
        [
            "# HELP vllm:generation_tokens_total Number of generation tokens processed.",
            "# TYPE vllm:generation_tokens_total counter",
            *per_engine,
            "vllm:generation_tokens_created 1.7e9",
        ]
    )


def test_parse_sums_engines_and_keeps_only_what_it_needs() -> None:
    sample = parse(vllm_text(1000, drafts=100, draft_tokens=700, accepted=400), t=5.0)
    assert sample.counters == {
        "generation": 1000,
        "prompt": 200,
        "drafts": 100,
        "draft_tokens": 700,
        "accepted": 400,
    }
    assert sample.per_position == (80.0, 50.0)
    assert sample.gauges == {"kv_cache_usage": 0.5, "running": 4.0}


def test_rates_over_the_window_handle_resets_gaps_and_variants_without_speculation() -> None:
    now = [100.0]
    samples = Samples(max_gap=6.0, wall=lambda: now[0])
    for t, gen, drafts, tokens, accepted in (
        (40, 0, 0, 0, 0),
        (42, 100, 10, 70, 40),
        (44, 300, 30, 210, 120),
    ):
        samples.add("mtp", parse(vllm_text(gen, drafts, tokens, accepted), t))
    samples.add("mtp", parse(vllm_text(40, 10, 70, 35), 46))  # a restart: counted from zero
    samples.add("mtp", parse(vllm_text(100, 20, 140, 70), 60))  # 14 s gap: no rate across it
    samples.add("mtp", parse(vllm_text(140, 30, 210, 105), 62))
    summary = samples.summary("mtp", window=60)
    # 100 + 200 + 40 + 40 tokens over 2 + 2 + 2 + 2 seconds
    assert summary["tokens_per_s"] == pytest.approx(380 / 8)
    assert summary["acceptance"] == pytest.approx((40 + 80 + 35 + 35) / (70 + 140 + 70 + 70), abs=1e-4)
    assert summary["mean_accepted_length"] == pytest.approx(1 + 190 / 50, abs=1e-3)
    assert summary["acceptance_per_position"] == [pytest.approx(0.8), pytest.approx(0.5)]
    assert summary["kv_cache_usage"] == 0.5
    line = samples.sparkline("mtp", since=0)
    assert [p[1] for p in line] == [50.0, 100.0, 20.0, None, 20.0]

    samples.add("baseline", parse(vllm_text(0).replace("spec_decode", "x"), 98))
    samples.add("baseline", parse(vllm_text(60).replace("spec_decode", "x"), 100))
    base = samples.summary("baseline", window=60)
    assert base["tokens_per_s"] == 30.0
    assert base["acceptance"] is None and base["mean_accepted_length"] is None
    assert samples.summary("mtp", window=30)["tokens_per_s"] is None  # nothing in the last 30 s
    assert samples.summary("dflash2")["tokens_per_s"] is None


def test_the_switch_log_follows_the_stages_and_keeps_a_bounded_history() -> None:
    clock = [0.0]
    log = SwitchLog(keep=3, clock=lambda: clock[0], wall=lambda: 1000 + clock[0])
    log.begin("mtp", "baseline", "compose-spec up")
    clock[0] = 1.0
    log.drained("h1", drained=2, cut=1, continued=3, refused=4)
    clock[0] = 2.0
    log.backend_call("/sleep", None)
    clock[0] = 4.0
    log.backend_call("/sleep", True)
    log.backend_ready(True)  # the sleeping old backend answers /health: no gate yet
    assert log.current.stage == "start"
    log.routed()  # to the sleeping container, which answers /health too
    clock[0] = 4.5
    log.backend_ready(True)
    assert log.current.stage == "gate"
    clock[0] = 5.0
    log.backend_call("/wake_up", None)
    clock[0] = 7.0
    log.backend_call("/wake_up", True)
    assert log.snapshot()["current"]["stage"] == "gate"
    assert log.sleeping == ["baseline"]
    clock[0] = 8.0
    log.released(["other"], {"ok": True})  # not the switch's hold
    assert log.current is not None
    log.released(["h1"], {"serving": "mtp", "ok": True, "detail": "woke"})
    done = log.snapshot()["recent"][0]
    assert done["outcome"] == "ok" and done["detail"] == "woke" and done["elapsed_s"] == 8.0
    assert [(s["stage"], s["seconds"]) for s in done["stages"]] == [
        ("drain", 1.0),
        ("stop", 1.0),
        ("sleep", 2.0),
        ("start", 1.0),
        ("wake", 2.0),
        ("gate", 1.0),
    ]
    assert (done["drained"], done["cut"], done["continued"], done["refused"]) == (2, 1, 3, 4)

    log.begin("dflash2", "mtp", "compose-spec up")
    log.drained("h2", 0, 0)
    log.expire(["h9"])  # the hold is gone: the host died
    assert log.snapshot()["recent"][0]["outcome"] == "abandoned"
    for i in range(3):
        log.begin("baseline", "mtp", "x")
        log.drained(f"z{i}", 0, 0)
        log.routed()
        log.backend_ready(True)
        assert log.current.stage == "gate"
        log.released([f"z{i}"], {"ok": False, "detail": "gate failed"})
    recent = log.snapshot()["recent"]
    assert len(recent) == 3 and {s["outcome"] for s in recent} == {"failed"}


def test_status_needs_the_key_and_never_shows_it(gateway, backend) -> None:
    url = f"{gateway.url}/gateway/status"
    assert httpx.get(url).status_code == 401
    wrong = httpx.get(url, headers={"Authorization": "Bearer nope"})
    assert wrong.status_code == 401 and wrong.json() == {"error": "Unauthorized"}
    ctl = GatewayControl(LocalExec(gateway.config.control_socket))
    ctl.report_serving("baseline")
    drained = ctl.drain(5, 30, owner="compose-spec up", probe_token="p" * 40, target="mtp")
    reply = httpx.get(url, headers={"Authorization": f"Bearer {KEY}"})
    assert reply.status_code == 200 and reply.headers["cache-control"] == "no-store"
    assert KEY not in reply.text and "p" * 40 not in reply.text and drained.hold_id not in reply.text
    status = reply.json()
    assert status["switch"]["to"] == "mtp" and status["switch"]["stage"] == "stop"
    assert status["serving"] == [] and "baseline" not in status["variants"]  # it stops: it serves no more
    assert status["requests"]["holds"][0]["owner"] == "compose-spec up"
    ctl.release(drained.hold_id, serving="mtp", ok=True, detail="swapped")
    status = httpx.get(url, headers={"Authorization": f"Bearer {KEY}"}).json()
    assert status["serving"] == ["mtp"] and status["switch"] is None
    assert status["switches"][0]["outcome"] == "ok" and status["switches"][0]["to"] == "mtp"
    assert (
        'gateway_serving_variant_info{variant="mtp"} 1.0' in httpx.get(f"{gateway.url}/gateway/metrics").text
    )


def test_the_page_is_static_with_a_strict_policy(gateway) -> None:
    reply = httpx.get(f"{gateway.url}/gateway/ui")
    assert reply.status_code == 200 and reply.headers["content-type"].startswith("text/html")
    csp = reply.headers["content-security-policy"]
    assert "default-src 'self'" in csp and "connect-src 'self'" in csp and "'unsafe-inline'" not in csp
    assert reply.headers["x-content-type-options"] == "nosniff"
    assert KEY not in reply.text and "http://" not in reply.text.replace("http://www.w3.org/2000/svg", "")
    assert "https://" not in reply.text


def test_a_bad_target_or_serving_name_is_refused_by_the_control_channel(gateway) -> None:
    ctl = GatewayControl(LocalExec(gateway.config.control_socket))
    from composer.errors import GatewayControlError

    with pytest.raises(GatewayControlError, match="target must be a variant name"):
        ctl.drain(1, 10, target="../etc")
    with pytest.raises(GatewayControlError, match="serving must be a variant name"):
        ctl.release(serving="a b")


def test_a_gateway_only_update_is_marked_and_the_page_says_so() -> None:
    log = SwitchLog()
    log.begin("mtp", None, "compose-spec up")
    log.drained("h1", 0, 0)
    log.routed()
    log.released(["h1"], {"serving": "mtp", "ok": True, "detail": GATEWAY_UPDATED})
    log.begin("baseline", "mtp", "compose-spec up")
    log.drained("h2", 0, 0)
    log.released(["h2"], {"serving": "baseline", "ok": True, "detail": "swapped"})
    recent = log.snapshot()["recent"]
    assert [s["gateway_only"] for s in recent] == [False, True]
    assert b"gateway settings updated" in PAGE and b"VLLM_API_KEY, from its env file" in PAGE


def test_a_probe_error_is_shown_as_a_sentence() -> None:
    assert plain_error("ConnectError: All connection attempts failed") == (
        "its server does not accept connections (starting, stopped or gone)"
    )
    assert plain_error("ReadTimeout") == "its server did not answer in time"
    assert plain_error("/health answered 503") == "/health answered 503"


def test_the_host_s_probation_is_shown_on_the_switch_that_brought_the_variant_in(gateway) -> None:
    """`up` returns when the variant serves and its probation goes on in the background: the
    host reports it running (until when) and then how it ended, on the newest switch only; a
    bad report is refused whole."""
    from composer.errors import GatewayControlError

    url = f"{gateway.url}/gateway/status"
    ctl = GatewayControl(LocalExec(gateway.config.control_socket))
    ctl.report_serving("baseline")
    drained = ctl.drain(5, 30, owner="compose-spec up", target="mtp")
    ctl.release(drained.hold_id, serving="mtp", ok=True, detail="swapped")
    assert ctl.report_probation("baseline", "running", 2e9) is False  # not the newest switch's variant
    assert ctl.report_probation("mtp", "running", 2e9) is True
    newest = httpx.get(url, headers={"Authorization": f"Bearer {KEY}"}).json()["switches"][0]
    assert newest["probation"] == {"state": "running", "until": 2e9}
    for state, until in (("maybe", None), ("running", -1), ("passed", True)):
        with pytest.raises(GatewayControlError, match="probation"):
            ctl.report_probation("mtp", state, until)
    assert ctl.report_probation("mtp", "passed") is True
    newest = httpx.get(url, headers={"Authorization": f"Bearer {KEY}"}).json()["switches"][0]
    assert newest["probation"] == {"state": "passed", "until": None}
    assert b"on probation until" in PAGE and b"probation " in PAGE
