"""The standby sleep waits for what the engine is still finishing where its vLLM can
(`/sleep?mode=wait`, vLLM 0.17+), and `doctor` names the risk where it cannot."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from composer.doctor.sleep_checks import check_sleep_wait
from composer.engine.images import release, sleep_waits
from composer.errors import GatewayControlError
from composer.gateway.host.client import GatewayControl
from composer.swap.standby import put_to_sleep
from tests.conftest import REPO


def stack(*flags: str):
    from composer.stack.load import load_stack

    return load_stack([REPO / "composer.toml"], REPO / ".env.demo", environ={}, flags=list(flags))


@pytest.mark.parametrize(
    ("version", "waits"),
    [
        ("0.17.0", True),
        ("v0.17.1", True),
        ("0.32.0+sim", True),
        ("1.0.0", True),
        ("0.16.2", False),
        ("0.9.2", False),
        ("", None),
        ("dev", None),
    ],
)
def test_a_vllm_version_says_whether_sleep_can_wait(version: str, waits: bool | None) -> None:
    assert sleep_waits(version) is waits
    assert (release(version) is None) is (waits is None)


class Control(GatewayControl):
    """The control channel's exec, answered here: what each backend call asked."""

    def __init__(self, version: Any) -> None:
        self.version = version
        self.calls: list[dict[str, Any]] = []

    def _call(self, method: str, path: str, body: Any = None, **_: Any) -> dict[str, Any]:
        assert (method, path) == ("POST", "/backend")
        self.calls.append(body)
        if body["path"] == "/version":
            if isinstance(self.version, Exception):
                raise self.version
            return {"status": 200, "body": self.version}
        return {"status": 200, "body": {}}


@pytest.mark.parametrize(
    ("version", "query"),
    [
        ({"version": "0.17.0"}, [["level", "1"], ["mode", "wait"]]),
        ({"version": "0.32.0+sim"}, [["level", "1"], ["mode", "wait"]]),
        ({"version": "0.16.0"}, [["level", "1"]]),  # it has no mode=wait (doctor warns)
        ("not json", [["level", "1"]]),
        (GatewayControlError("backend", "gone"), [["level", "1"]]),
    ],
)
def test_the_standby_sleep_asks_to_wait_where_the_engine_can(version: Any, query: list) -> None:
    control = Control(version)
    put_to_sleep(control, "baseline", stack("variants.baseline.standby=sleep"))
    asked, slept = control.calls
    assert (asked["method"], asked["path"]) == ("GET", "/version")
    assert (slept["method"], slept["path"], slept["query"]) == ("POST", "/sleep", query)


class Images:
    """`client.images.get` of the Docker SDK: each reference's labels."""

    def __init__(self, labels: dict[str, dict[str, str]]) -> None:
        self.labels = labels

    def get(self, ref: str) -> Any:
        return SimpleNamespace(labels=self.labels[ref], short_id="sha256:abc")


def test_doctor_names_the_sleep_risk_of_a_vllm_without_mode_wait() -> None:
    sleepy = stack("variants.baseline.standby=sleep")
    ref = sleepy.images[sleepy.variants["baseline"].image_key]

    def finding(version: str):
        labels = {"vllm-composer.vllm-version": version} if version else {}
        return check_sleep_wait(sleepy, SimpleNamespace(images=Images({ref: labels})))

    old = finding("0.16.1")
    assert old is not None and old.status == "warn" and old.variant is None
    assert "vLLM 0.16.1" in old.detail and "baseline" in old.detail and "45520" in old.detail
    assert "mode=wait" in old.detail and "0.17" in old.fix and 'standby = "stop"' in old.fix
    assert finding("0.17.0").status == "ok"
    unknown = finding("")
    assert unknown.status == "ok" and "version --probe" in unknown.detail
    # nothing sleeps, or no engine to ask: not applicable
    assert check_sleep_wait(stack(), SimpleNamespace(images=Images({ref: {}}))) is None
    assert check_sleep_wait(sleepy, None) is None


def test_the_standby_sleep_lets_a_simulated_vllm_finish_what_it_still_runs(tmp_path) -> None:
    """Through a real gateway to the simulator (which reports the vLLM it emulates, 0.32): a
    request still decoding when `up` puts the variant to sleep finishes whole, not aborted."""
    import json
    import threading

    from tests.gateway.fakes import GatewayThread, LocalExec
    from tests.sim.simproc import SIM_MODEL, SimProcess, metric

    sim = SimProcess.start(
        [str(SIM_MODEL), "--served-model-name", "m", "--enable-sleep-mode"],
        env={"SIM_TIME_SCALE": "20", "VLLM_SERVER_DEV_MODE": "1"},
        log_dir=tmp_path,
    ).wait_ready(30)
    gateway = GatewayThread(f"http://127.0.0.1:{sim.port}", served_name="m").start()
    try:
        gateway.wait(lambda g: g.upstream.ready)
        answer: dict[str, Any] = {}
        body = {"model": "m", "prompt": "finish me", "max_tokens": 2000, "ignore_eos": True}
        asking = threading.Thread(
            target=lambda: answer.update(
                json.loads(sim.request("POST", "/v1/completions", body, timeout=120)[1])
            )
        )
        asking.start()
        gateway.wait(lambda g: metric(sim.metrics(), "vllm:num_requests_running") >= 1)
        put_to_sleep(GatewayControl(LocalExec(gateway.config.control_socket)), "baseline", stack())
        asking.join(timeout=60)
        assert answer["choices"][0]["finish_reason"] == "length", answer
        assert answer["usage"]["completion_tokens"] == 2000
        assert GatewayControl(LocalExec(gateway.config.control_socket)).is_sleeping()
    finally:
        gateway.stop()
        sim.stop()
