"""The status page in a real headless Chromium (Debian's `chromium` + `chromium-driver`).

A compose stack on the simulator (`compose-spec up baseline`, the gateway image in front),
load through its port, and a switch baseline -> mtp by a real `compose-spec up mtp` (the CLI,
a subprocess). The page must show nothing before the key, an error (no data) for a wrong
key, the serving variant and a tokens/s sparkline with the right key, the swap's stage
within 2 s of the swap's start (the time the gateway records for its drain) and the new
variant after, its probation running in the background and then passed. Screenshots of each state go to build/test-artifacts/status-page/.
"""

from __future__ import annotations

import shutil
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.conftest import in_ci

from .composelab import ComposeStack, compose_stack

pytestmark = pytest.mark.docker

webdriver = pytest.importorskip("selenium.webdriver")
from selenium.webdriver.common.by import By  # noqa: E402

ARTIFACTS = Path(__file__).resolve().parents[2] / "build" / "test-artifacts" / "status-page"
CHROMIUM = shutil.which("chromium")
DRIVER = shutil.which("chromedriver")
FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--disable-dev-shm-usage",
    "--window-size=420,1400",
)

PROBATION_S = 20  # the switch's probation (its settle watch counts in it): `up` returns before it ends
STAGE_WITHIN_S = 2.0  # the bound: the page shows a swap's stage this soon after it starts
pytestmark = [
    pytestmark,
    pytest.mark.skipif(
        (not (CHROMIUM and DRIVER)) and not in_ci(),
        reason="Debian's chromium and chromium-driver are not installed (make tools)",
    ),
]


@pytest.fixture(scope="module")
def lab(docker_client, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ComposeStack]:
    # variants load for 2 s: the swap lasts long enough for the page to show its stages
    with compose_stack(
        docker_client, tmp_path_factory.mktemp("page"), "page", 'SIM_LOAD_SECONDS = "2"\n'
    ) as stack:
        done = stack.run("up", "baseline")
        assert done.returncode == 0, done.stdout + done.stderr
        stack.start_load()
        yield stack


@pytest.fixture(scope="module")
def browser() -> Iterator[object]:
    from selenium.webdriver.chrome.service import Service

    profile = tempfile.mkdtemp(prefix="status-chromium-")
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in (*FLAGS, f"--user-data-dir={profile}"):
        options.add_argument(flag)
    driver = webdriver.Chrome(service=Service(executable_path=DRIVER), options=options)
    driver.set_page_load_timeout(30)
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    yield driver
    driver.quit()
    shutil.rmtree(profile, ignore_errors=True)


def wait_for(check: Callable[[], object], what: str, timeout: float = 15.0) -> object:
    """Poll `check()` until truthy (bounded)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(0.1)
    raise AssertionError(f"the page never showed {what} within {timeout:g}s")


def text(driver, element_id: str) -> str:
    return driver.find_element(By.ID, element_id).text


def enter_key(driver, key: str) -> None:
    wait_for(lambda: driver.find_element(By.ID, "login").is_displayed(), "the key form")
    driver.find_element(By.ID, "key").send_keys(key)
    driver.find_element(By.CSS_SELECTOR, "#login button").click()


def test_the_page_shows_nothing_without_the_key_and_an_error_for_a_wrong_one(lab, browser) -> None:
    browser.get(f"{lab.url}/gateway/ui")
    assert browser.find_element(By.ID, "login").is_displayed()
    assert not browser.find_element(By.ID, "data").is_displayed()
    assert "baseline" not in browser.page_source
    enter_key(browser, "not-the-key")
    wait_for(lambda: "Wrong key" in text(browser, "error"), "the wrong-key error")
    browser.save_screenshot(str(ARTIFACTS / "wrong-key.png"))
    assert not browser.find_element(By.ID, "data").is_displayed()
    assert browser.find_elements(By.CSS_SELECTOR, "#variants [data-variant]") == []
    assert browser.execute_script("return sessionStorage.length") == 0


def test_with_the_key_it_shows_the_serving_variant_a_sparkline_and_a_switch(lab, browser) -> None:
    browser.get(f"{lab.url}/gateway/ui")
    enter_key(browser, lab.key)
    wait_for(lambda: text(browser, "serving") == "baseline", "baseline serving")
    assert lab.key not in browser.page_source
    sparkline = "#variants [data-variant='baseline'] svg.spark polyline"

    def drawn() -> bool:  # at least three points of the tokens/s series (read in one go: it re-renders)
        script = (
            "return Array.from(document.querySelectorAll(arguments[0]))"
            ".some(l => (l.getAttribute('points') || '').trim().split(/\\s+/).length >= 3)"
        )
        return bool(browser.execute_script(script, sparkline))

    wait_for(drawn, "a tokens/s sparkline", 30)
    wait_for(
        lambda: "tok/s" in text(browser, "variants") and "- tok/s" not in text(browser, "variants"),
        "a tokens/s figure",
    )
    browser.save_screenshot(str(ARTIFACTS / "serving.png"))

    up = lab.popen("--set", f"stack.probation={PROBATION_S}s", "up", "mtp")
    try:
        switch = _switch_started(lab, up)
        # the page polls once a second: it must show the stage before 2 s have passed since
        # the gateway began the swap's drain (wall clocks: the containers share the host's)
        left = switch["started_at"] + STAGE_WITHIN_S - time.time()
        wait_for(lambda: text(browser, "switch-route") == "baseline \u2192 mtp", "the swap", max(left, 0.0))
        stage = text(browser, "switch-stage")
        assert stage in {"drain", "stop", "start", "gate"}, stage
        assert "switching" in text(browser, "state")
        browser.save_screenshot(str(ARTIFACTS / "switching.png"))
    finally:
        out, err = up.communicate(timeout=180)
    assert up.returncode == 0, out + err

    wait_for(lambda: text(browser, "serving") == "mtp", "mtp serving after the switch")
    wait_for(lambda: "baseline \u2192 mtp" in text(browser, "history"), "the switch in the history")
    assert "ok" in text(browser, "history")
    # `up` returned when mtp served; its probation goes on in the background, and the page says so
    # until it ends (then how it ended)
    newest = "var e = document.querySelector('#history li'); return e ? e.textContent : ''"
    wait_for(
        lambda: any(t in browser.execute_script(newest) for t in ("on probation until", "probation passed")),
        "the probation going on",
    )
    wait_for(
        lambda: "probation passed" in browser.execute_script(newest), "the probation's end", PROBATION_S + 30
    )
    mtp = "#variants [data-variant='mtp']"
    card = "var e = document.querySelector(arguments[0]); return e ? e.textContent : ''"
    wait_for(
        lambda: "acceptance " in (t := browser.execute_script(card, mtp)) and "acceptance -" not in t,
        "mtp's acceptance",
        30,
    )
    browser.save_screenshot(str(ARTIFACTS / "after-switch.png"))


def _switch_started(lab: ComposeStack, up) -> dict:
    """The swap as `/gateway/status` shows it once the CLI's drain began (polled closely)."""
    deadline = time.monotonic() + 60
    while True:
        switch = lab.status()["switch"]
        if switch is not None:
            return switch
        assert up.poll() is None, up.communicate()
        assert time.monotonic() < deadline, "compose-spec up mtp never began a switch"
        time.sleep(0.05)
