"""The gateway image with the real daemon, the simulator and the official `openai` SDK: a held
stream gets headers and keep-alive comments through a cold start and then its tokens, the
model list shows the aliases, an alias with no follower is answered at once, and a gateway
restarted under held requests answers them 503 with Retry-After."""

from __future__ import annotations

import threading
import time

import httpx
import openai
import pytest

from composer.gateway import GatewayControl

from .dockerlab import KEY, SERVED, Lab
from .test_image import image  # noqa: F401 - the module-scoped image fixture

pytestmark = pytest.mark.docker

AUTH = {"Authorization": f"Bearer {KEY}"}
MESSAGES = [{"role": "user", "content": "hi"}]


def _until(predicate, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, what
        time.sleep(0.05)


def test_clients_meet_the_gateway_image(docker_client, image) -> None:  # noqa: F811
    lab = Lab(docker_client).start(
        {"GATEWAY_HOLD_KEEPALIVE": "1", "GATEWAY_SWITCH_ON_MODEL": "true", "GATEWAY_ALIASES": "fast=mtp"}
    )
    try:
        lab.wait_gateway()
        pieces: list[bytes] = []
        status: list[int] = []

        def stream() -> None:
            body = {"model": SERVED, "messages": MESSAGES, "stream": True, "max_tokens": 8}
            with httpx.stream(
                "POST", lab.url + "/v1/chat/completions", json=body, headers=AUTH, timeout=60
            ) as r:
                status.append(r.status_code)
                pieces.extend(r.iter_raw())

        streaming = threading.Thread(target=stream, daemon=True)
        streaming.start()
        # no variant yet: the held stream gets its headers and a keep-alive comment
        _until(lambda: status and any(p.startswith(b": held") for p in pieces), 15, "no keep-alive comment")
        lab.start_sim("a")
        streaming.join(60)
        text = b"".join(pieces).decode()
        assert status == [200] and text.rstrip().endswith("data: [DONE]"), text[-500:]
        assert '"choices"' in text

        client = openai.OpenAI(base_url=lab.url + "/v1", api_key=KEY, max_retries=0, timeout=10)
        models = {m.id: m.model_extra.get("variant") for m in client.models.list()}
        assert models == {SERVED: None, "fast": "mtp"}
        with pytest.raises(
            openai.InternalServerError, match="no compose-spec follow is running for this stack"
        ):
            client.chat.completions.create(model="fast", messages=MESSAGES, max_tokens=4)

        # a restart under a held request: 503 with Retry-After, never 500
        ctl = GatewayControl(lab.gateway)
        ctl.hold(60)
        answers: list[httpx.Response] = []
        body = {"model": SERVED, "messages": MESSAGES, "max_tokens": 4}
        held = threading.Thread(
            target=lambda: answers.append(
                httpx.post(lab.url + "/v1/chat/completions", json=body, headers=AUTH, timeout=60)
            ),
            daemon=True,
        )
        held.start()
        _until(lambda: ctl.state().held == 1, 15, "the request was not held")
        lab.gateway.restart(timeout=10)
        held.join(30)
        assert len(answers) == 1 and answers[0].status_code == 503, answers
        assert "retry-after" in answers[0].headers
        assert "the gateway is stopping" in answers[0].json()["error"]["message"]
    finally:
        lab.cleanup()
