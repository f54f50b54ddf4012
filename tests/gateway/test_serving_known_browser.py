"""What serves, as the gateway shows it, through restarts and replacements of the gateway (a
compose stack on the simulator, the CLI as a subprocess, the status page in a real headless
Chromium): with one variant serving and with a live set, after `docker restart` of the gateway
and after `up --recreate-gateway`, and after `up baseline` from a live set, the page, the
status JSON and `gateway_serving_variant_info` name what serves, and the next switch's history
line names the variant it replaced. With a live set the page shows every member serving with
its share of the requests. Screenshots go to build/test-artifacts/status-page/."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest

from tests.conftest import in_ci

from .composelab import ComposeStack, compose_stack
from .test_status_page_browser import ARTIFACTS, CHROMIUM, DRIVER, enter_key, text, wait_for
from .test_status_page_browser import browser as chromium

pytestmark = pytest.mark.docker
webdriver = pytest.importorskip("selenium.webdriver")

pytestmark = [
    pytestmark,
    pytest.mark.skipif(
        (not (CHROMIUM and DRIVER)) and not in_ci(),
        reason="Debian's chromium and chromium-driver are not installed (make tools)",
    ),
]

PLACEMENT = '[variants.baseline]\ngpus = "0,1"\n[variants.mtp]\ngpus = "2,3"\n'
CARDS = "#variants [data-variant]"


@pytest.fixture(scope="module")
def lab(docker_client, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ComposeStack]:
    with compose_stack(docker_client, tmp_path_factory.mktemp("known"), "known", PLACEMENT) as stack:
        done = stack.run("up", "baseline")
        assert done.returncode == 0, done.stdout + done.stderr
        stack.start_load()
        yield stack


browser = chromium  # the headless Chromium fixture


@pytest.fixture(scope="module")
def page(lab: ComposeStack, browser) -> object:
    browser.get(f"{lab.url}/gateway/ui")
    enter_key(browser, lab.key)
    return browser


def gateway_container(docker_client, lab: ComposeStack):
    found = docker_client.containers.list(
        filters={"label": [f"com.docker.compose.project={lab.project}", "com.docker.compose.service=gateway"]}
    )
    assert len(found) == 1, [c.name for c in found]
    return found[0]


def serving_metric(lab: ComposeStack) -> set[str]:
    body = httpx.get(f"{lab.url}/gateway/metrics", timeout=10).text
    prefix = 'gateway_serving_variant_info{variant="'
    return {line[len(prefix) :].split('"', 1)[0] for line in body.splitlines() if line.startswith(prefix)}


def cards(driver) -> dict[str, str]:
    """Each variant card's name and text, read in one go (the page re-renders every second)."""
    script = (
        "return Array.from(document.querySelectorAll(arguments[0]))"
        ".map(e => [e.dataset.variant, e.textContent])"
    )
    return dict(driver.execute_script(script, CARDS))


def shows(driver, lab: ComposeStack, serving: list[str], shot: str) -> None:
    """The page, `/gateway/status` and the metric name `serving`, and no unknown variant."""
    driver.refresh()  # a new page load: what the gateway says now, not what the page kept
    wait_for(lambda: text(driver, "serving") == ", ".join(serving), f"{serving} serving", 60)
    wait_for(lambda: text(driver, "state") == "serving " + ", ".join(serving), "the serving pill", 30)
    wait_for(lambda: all("serving" in cards(driver).get(v, "") for v in serving), "the serving cards", 30)
    assert "unknown" not in cards(driver)
    assert lab.status()["serving"] == serving
    assert serving_metric(lab) == set(serving)
    driver.save_screenshot(str(ARTIFACTS / f"known-{shot}.png"))


def restarted(docker_client, lab: ComposeStack) -> None:
    gateway_container(docker_client, lab).restart(timeout=30)
    wait_for(lambda: _answers(lab), "the restarted gateway", 60)


def recreated(lab: ComposeStack) -> None:
    done = lab.run("up", "--recreate-gateway")
    assert done.returncode == 0, done.stdout + done.stderr


def _answers(lab: ComposeStack) -> bool:
    try:
        return httpx.get(f"{lab.url}/gateway/health", timeout=5).status_code == 200
    except httpx.HTTPError:
        return False


def test_one_variant_is_known_after_a_restart_and_a_replacement(docker_client, lab, page) -> None:
    shows(page, lab, ["baseline"], "single")
    restarted(docker_client, lab)
    shows(page, lab, ["baseline"], "single-restarted")
    recreated(lab)
    shows(page, lab, ["baseline"], "single-replaced")


def test_a_live_set_shows_every_member_serving_with_its_share(docker_client, lab, page) -> None:
    done = lab.run("up", "baseline", "mtp")
    assert done.returncode == 0, done.stdout + done.stderr
    shows(page, lab, ["baseline", "mtp"], "live")

    def shares() -> bool:
        found = cards(page)
        return all("% of the requests" in found.get(v, "") for v in ("baseline", "mtp"))

    wait_for(shares, "each member's share of the requests", 60)
    status = lab.status()["variants"]
    assert {status[v]["state"] for v in ("baseline", "mtp")} == {"serving"}
    # one client at a time: the classes may send it all to one member (a share of 0 is shown)
    assert status["baseline"]["share"] + status["mtp"]["share"] == pytest.approx(1.0, abs=0.001)
    page.save_screenshot(str(ARTIFACTS / "known-live-shares.png"))
    restarted(docker_client, lab)
    shows(page, lab, ["baseline", "mtp"], "live-restarted")
    recreated(lab)
    shows(page, lab, ["baseline", "mtp"], "live-replaced")


def test_back_to_one_variant_the_gateway_knows_it_and_the_next_switch_names_it(lab, page) -> None:
    done = lab.run("up", "baseline")  # from the live set of the test before
    assert done.returncode == 0, done.stdout + done.stderr
    shows(page, lab, ["baseline"], "back-to-one")
    done = lab.run("up", "mtp")
    assert done.returncode == 0, done.stdout + done.stderr
    shows(page, lab, ["mtp"], "switched")
    assert lab.status()["switches"][0]["from"] == "baseline"
    wait_for(lambda: "baseline \u2192 mtp" in text(page, "history"), "the switch in the history", 30)
    assert "- \u2192 mtp" not in text(page, "history")
