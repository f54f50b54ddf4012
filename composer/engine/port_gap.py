"""How long the published port did not serve while the gateway's container was replaced
(Docker publishes a port to one container at a time: between the two, connections are
refused or reset). `PortWatch` probes it in a thread, each time a fresh connection with
`GET /gateway/health` (no key, never held), and counts the failures by kind. `PortGap`: for
each run of failed probes, from the first one's start to the start of the next answered
one (or the end of the watch).
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from urllib.parse import urlsplit

from composer.engine import retry
from composer.engine.published_port import HEALTH_PATH
from composer.engine.retry import Pending

CONNECT_TIMEOUT_S = 0.25  # seconds one probe waits to connect (a refusal comes at once)
PROBE_TIMEOUT_S = 1.0  # seconds it then waits for the status line
SERVED_WAIT_S = 2.0  # seconds `stop` waits for a probe of its own to be answered again
OK, REFUSED, RESET, UNAVAILABLE, SILENT, OTHER = "ok", "refused", "reset", "503", "silent", "other"
FAILURES = (REFUSED, RESET, UNAVAILABLE, SILENT, OTHER)
WORDS = {
    REFUSED: "refused",
    RESET: "reset",
    UNAVAILABLE: "answered 503",
    SILENT: "silent",
    OTHER: "other errors",
}


def probe_port(host: str, port: int, timeout: float = PROBE_TIMEOUT_S) -> str:
    """One probe: `OK` for a 2xx/3xx/4xx status line, else which failure it was."""
    request = f"GET {HEALTH_PATH} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n".encode()
    try:
        with socket.create_connection((host, port), timeout=min(timeout, CONNECT_TIMEOUT_S)) as sock:
            sock.settimeout(timeout)
            sock.sendall(request)
            head = sock.recv(64)
    except ConnectionRefusedError:
        return REFUSED
    except (ConnectionResetError, ConnectionAbortedError, BrokenPipeError):
        return RESET
    except TimeoutError:
        return SILENT
    except OSError:  # unreachable, no route: not served either
        return OTHER
    if not head:
        return RESET  # accepted, then closed without a word
    parts = head.split(b" ", 2)
    status = int(parts[1]) if len(parts) > 1 and parts[1].isdigit() else 0
    return UNAVAILABLE if status == 503 else OK if 200 <= status < 500 else OTHER


@dataclass(frozen=True)
class PortGap:
    """What the watch saw: `probes` made, `failed` of them (by kind in `kinds`), `seconds` the
    port did not serve, over `watched` seconds."""

    probes: int
    failed: int
    seconds: float
    watched: float
    kinds: tuple[tuple[str, int], ...] = ()

    def to_json(self) -> dict[str, object]:
        return {
            "seconds": round(self.seconds, 3),
            "probes": self.probes,
            "failed": self.failed,
            "watched": round(self.watched, 3),
            **{WORDS[kind].replace(" ", "_"): count for kind, count in self.kinds},
        }

    def line(self) -> str:
        """`the port refused 31 of 96 probes over 0.62 s (27 refused, 4 reset; watched 2.10 s)`."""
        return describe(self.to_json())


def describe(gap: dict[str, object]) -> str:
    """A `PortGap.to_json()` as one line: never "all answered" when a probe failed."""
    if not gap.get("failed"):
        return f"the port answered all {gap.get('probes', 0)} probes (watched {gap.get('watched', 0):.2f} s)"
    kinds = ", ".join(
        f"{gap[key]} {word}" for word in WORDS.values() if (key := word.replace(" ", "_")) in gap
    )
    return (
        f"the port refused {gap['failed']} of {gap['probes']} probes over {gap['seconds']:.2f} s "
        f"({kinds}; watched {gap['watched']:.2f} s)"
    )


def count(results: list[tuple[float, str]], began: float, ended: float) -> PortGap:
    """The gap in `(probe start, result)` pairs (in time order) of a watch from `began` to `ended` (pure)."""
    seconds, since = 0.0, None
    kinds: dict[str, int] = {}
    for at, result in results:
        if result == OK:
            if since is not None:
                seconds += at - since
            since = None
            continue
        kinds[result] = kinds.get(result, 0) + 1
        if since is None:
            since = at
    if since is not None:
        seconds += ended - since
    failed = sum(kinds.values())
    ordered = tuple((kind, kinds[kind]) for kind in FAILURES if kind in kinds)
    return PortGap(len(results), failed, seconds, ended - began, ordered)


class PortWatch:
    """Probes `url`'s host and port in a thread from `start()` to `stop()` (a context manager);
    `probe` is injectable for tests."""

    def __init__(
        self,
        url: str,
        *,
        interval: float = retry.PORT_GAP_INTERVAL_S,
        probe: Callable[[str, int], str] = probe_port,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        parts = urlsplit(url)
        self.host, self.port = parts.hostname or "127.0.0.1", parts.port or 80
        self.interval, self._probe, self._clock = interval, probe, clock
        self._results: list[tuple[float, str]] = []
        self._stopped = threading.Event()
        self._served = threading.Event()  # a probe begun after `_served_after` was answered
        self._served_after: float | None = None
        self._thread = threading.Thread(target=self._run, name="port-gap", daemon=True)
        self._began = 0.0

    def _run(self) -> None:
        def attempt() -> None:
            at = self._clock()
            result = self._probe(self.host, self.port)
            self._results.append((at, result))
            after = self._served_after
            if result == OK and after is not None and at >= after:
                self._served.set()
            raise Pending("watching")

        retry.port_watch(self.interval, self._stopped)(attempt)

    def start(self) -> PortWatch:
        self._began = self._clock()
        self._thread.start()
        return self

    def stop(self, wait_served: float = 0.0) -> PortGap:
        """End the watch (after the probe in flight) and count what it saw; `wait_served`: first
        wait, at most that many seconds, for a probe begun after this call to be answered (the
        new gateway serves: the gap is closed by the watch's own probe)."""
        if wait_served > 0 and self._thread.is_alive():
            self._served_after = self._clock()
            self._served.wait(wait_served)
        self._stopped.set()
        self._thread.join()
        return count(list(self._results), self._began, self._clock())

    def __enter__(self) -> PortWatch:
        return self.start()

    def __exit__(self, *_: object) -> None:
        self.stop()
