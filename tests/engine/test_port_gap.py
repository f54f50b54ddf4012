"""The published port watched while the gateway's container is replaced (`composer.engine.port_gap`),
without Docker: a real local HTTP server stopped and started again on the same port, so the
probes meet real refusals, resets and 503s; the count and the window are checked against what
happened, and the line never says all answered when a probe failed."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from composer.engine import port_gap
from composer.engine.port_gap import OK, REFUSED, RESET, UNAVAILABLE, PortGap, PortWatch, count, describe
from tests.conftest import free_port


@contextmanager
def serving(port: int, status: int = 200) -> Iterator[None]:
    """An HTTP server on 127.0.0.1:`port` answering every GET with `status` until the block ends."""

    class Answer(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(status)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *args: object) -> None:
            return None

    ThreadingHTTPServer.allow_reuse_address = True
    server = ThreadingHTTPServer(("127.0.0.1", port), Answer)
    thread = threading.Thread(target=server.serve_forever, args=(0.02,), daemon=True)
    thread.start()
    try:
        yield
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


@contextmanager
def hanging_up(port: int) -> Iterator[None]:
    """A listener that accepts each connection and closes it without a word."""
    listener = socket.socket()
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind(("127.0.0.1", port))
    listener.listen(64)
    listener.settimeout(0.05)
    done = threading.Event()

    def run() -> None:
        while not done.is_set():
            try:
                conn, _ = listener.accept()
            except TimeoutError:
                continue
            conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
            conn.close()  # linger 0: a reset

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    try:
        yield
    finally:
        done.set()
        thread.join()
        listener.close()


def test_one_probe_tells_answered_refused_reset_and_503() -> None:
    port = free_port()
    assert port_gap.probe_port("127.0.0.1", port) == REFUSED
    with serving(port):
        assert port_gap.probe_port("127.0.0.1", port) == OK
    with serving(port, status=503):
        assert port_gap.probe_port("127.0.0.1", port) == UNAVAILABLE
    with hanging_up(port):
        assert port_gap.probe_port("127.0.0.1", port) == RESET


class Probes:
    """The watch's clock and probe, recording each probe's start (the time the watch gives it)
    and result, so a test waits on what the probes saw and checks the count against them."""

    def __init__(self) -> None:
        self.seen: list[tuple[float, str]] = []
        self.ticks: list[float] = []  # every reading of the clock, in order
        self.changed = threading.Condition()
        self._last = threading.local()

    def clock(self) -> float:
        with self.changed:
            self._last.at = time.monotonic()
            self.ticks.append(self._last.at)
        return self._last.at

    def probe(self, host: str, port: int) -> str:
        result = port_gap.probe_port(host, port)
        with self.changed:
            self.seen.append((self._last.at, result))
            self.changed.notify_all()
        return result

    def wait(self, until, timeout: float = 30.0) -> None:
        """Until `until(seen)` holds (a condition, not a time; `timeout` only stops a hang)."""
        with self.changed:
            assert self.changed.wait_for(lambda: until(list(self.seen)), timeout), self.seen

    def watch(self, port: int) -> PortWatch:
        return PortWatch(f"http://127.0.0.1:{port}", interval=0.01, probe=self.probe, clock=self.clock)


def test_a_server_stopped_and_started_again_is_counted_refused_over_its_downtime() -> None:
    port = free_port()
    probes = Probes()
    # the same port: served, then stopped (refused) for some probes, then served again
    with serving(port):
        watch = probes.watch(port).start()
        probes.wait(lambda seen: any(result == OK for _, result in seen))
    down = time.monotonic()  # the listener is closed: every probe begun from here is refused
    probes.wait(lambda seen: sum(at >= down and result == REFUSED for at, result in seen) >= 3)
    up = time.monotonic()
    with serving(port):
        gap = watch.stop(wait_served=30.0)
    seen = probes.seen
    kinds = dict(gap.kinds)  # a probe the closing listener had accepted is reset
    assert kinds[REFUSED] > 0 and set(kinds) <= {REFUSED, RESET} and sum(kinds.values()) == gap.failed
    assert gap.probes == len(seen) and gap.probes > gap.failed  # answered before and after
    # one window, from the first failed probe's start to the next answered one's start: it
    # holds every probe begun while the port was closed, and only failures
    first = next(i for i, (_, result) in enumerate(seen) if result != OK)
    back = next(i for i in range(first, len(seen)) if seen[i][1] == OK)
    assert all(result != OK for _, result in seen[first:back])
    assert all(result == OK for _, result in seen[back:])
    closed = [at for at, _ in seen if down <= at < up]  # probes begun while the port was closed
    assert seen[first][0] <= closed[0] <= closed[-1] <= seen[back][0]
    assert gap.failed == back - first
    assert gap.seconds == seen[back][0] - seen[first][0]
    assert gap.line().startswith(f"the port refused {gap.failed} of {gap.probes} probes over ")
    assert gap.to_json()["refused"] == kinds[REFUSED]


def test_a_port_that_always_answers_has_no_gap_and_says_so() -> None:
    port = free_port()
    probes = Probes()
    with serving(port), probes.watch(port) as watch:
        probes.wait(lambda seen: len(seen) >= 5)
        gap = watch.stop(wait_served=30.0)
    assert gap.failed == 0 and gap.seconds == 0 and gap.probes >= 5
    assert gap.line().startswith(f"the port answered all {gap.probes} probes")


def test_a_port_that_never_comes_back_counts_until_the_watch_ends() -> None:
    port = free_port()
    probes = Probes()
    watch = probes.watch(port).start()
    probes.wait(lambda seen: len(seen) >= 3)
    gap = watch.stop(wait_served=0.1)  # never served: it waits out the 0.1 s, then ends
    assert gap.failed == gap.probes == len(probes.seen) > 0
    # the watch runs from its first reading of the clock (start) to its last (stop), and the
    # window from the first probe's start to that end, past the last probe
    began, ended = probes.ticks[0], probes.ticks[-1]
    assert gap.watched == ended - began
    assert gap.seconds == ended - probes.seen[0][0]
    assert ended > probes.seen[-1][0]


def test_count_sums_each_run_of_failures_up_to_the_next_answer() -> None:
    results = [(0.0, OK), (1.0, REFUSED), (1.5, RESET), (2.0, OK), (3.0, UNAVAILABLE), (3.25, OK)]
    gap = count(results, 0.0, 4.0)
    assert (gap.probes, gap.failed, gap.seconds, gap.watched) == (6, 3, 1.25, 4.0)
    assert gap.kinds == ((REFUSED, 1), (RESET, 1), (UNAVAILABLE, 1))
    assert count([(0.0, REFUSED)], 0.0, 0.5).seconds == 0.5  # never back: until the end
    line = describe(gap.to_json())
    assert (
        line
        == "the port refused 3 of 6 probes over 1.25 s (1 refused, 1 reset, 1 answered 503; watched 4.00 s)"
    )
    assert "answered all" not in line
    assert PortGap(4, 0, 0.0, 1.0).line() == "the port answered all 4 probes (watched 1.00 s)"
