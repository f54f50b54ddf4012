"""The status page in a real headless Chromium (Debian's `chromium` + `chromium-driver`).

Two simulator processes behind an in-process gateway on 127.0.0.1, load through it, and a
switch baseline -> mtp driven through the control channel as `compose-spec up` drives it.
The page must show nothing before the key, an error (no data) for a wrong key, the serving
variant and a tokens/s sparkline with the right key, the switch's stage while it runs and
the new variant after. Screenshots of each state go to build/test-artifacts/status-page/.
"""

from __future__ import annotations

import shutil
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.conftest import in_ci

from .statuslab import KEY, Lab

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

pytestmark = pytest.mark.skipif(
    (not (CHROMIUM and DRIVER)) and not in_ci(),
    reason="Debian's chromium and chromium-driver are not installed (make tools)",
)


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Lab]:
    lab = Lab(tmp_path_factory.mktemp("sims"))
    lab.report_serving("baseline")
    lab.start_load()
    yield lab
    lab.close()


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
    browser.get(f"{lab.gateway.url}/gateway/ui")
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
    browser.get(f"{lab.gateway.url}/gateway/ui")
    enter_key(browser, KEY)
    wait_for(lambda: text(browser, "serving") == "baseline", "baseline serving")
    assert KEY not in browser.page_source
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

    with lab.switch("mtp"):
        wait_for(lambda: text(browser, "switch-route") == "baseline \u2192 mtp", "the switch", 5)
        stage = text(browser, "switch-stage")
        assert stage in {"drain", "stop", "start", "gate"}, stage
        assert "switching" in text(browser, "state")
        browser.save_screenshot(str(ARTIFACTS / "switching.png"))

    wait_for(lambda: text(browser, "serving") == "mtp", "mtp serving after the switch")
    wait_for(lambda: "baseline \u2192 mtp" in text(browser, "history"), "the switch in the history")
    assert "ok" in text(browser, "history")
    mtp = "#variants [data-variant='mtp']"
    card = "var e = document.querySelector(arguments[0]); return e ? e.textContent : ''"
    wait_for(
        lambda: "acceptance " in (t := browser.execute_script(card, mtp)) and "acceptance -" not in t,
        "mtp's acceptance",
        30,
    )
    browser.save_screenshot(str(ARTIFACTS / "after-switch.png"))
