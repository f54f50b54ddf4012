"""Fixtures: a fake backend and a gateway in front of it, both real servers on 127.0.0.1."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from .fakes import FakeBackend, GatewayThread
from .livelab import live_gateway, start_sim

KEY = "test-key-123"


@pytest.fixture
def backend() -> Iterator[FakeBackend]:
    server = FakeBackend().start()
    server.state.api_key = KEY
    yield server
    server.state.release.set()
    server.stop()


@pytest.fixture
def make_gateway(backend: FakeBackend) -> Iterator:
    started: list[GatewayThread] = []

    def make(ready: bool = True, **settings) -> GatewayThread:
        settings.setdefault("api_key", KEY)
        gw = GatewayThread(backend.url, **settings).start()
        started.append(gw)
        if ready:
            gw.wait(lambda g: g.upstream.ready)
        return gw

    yield make
    for gw in started:
        gw.stop()


@pytest.fixture
def gateway(make_gateway) -> GatewayThread:
    return make_gateway()


@pytest.fixture
def sims(tmp_path: Path):
    started = []

    def make(variant: str, **kwargs):
        sim = start_sim(variant, tmp_path, **kwargs)
        started.append(sim)
        return sim

    yield make
    for sim in started:
        sim.stop()


@pytest.fixture
def gateways():
    started = []

    def make(members, **settings):
        gw = live_gateway(members, **settings)
        started.append(gw)
        return gw

    yield make
    for gw in started:
        gw.stop()
