"""One `docker exec` for a swap's control channel: `ctl session` runs verbs read from its
stdin (one JSON line each way) and releases its owner's holds at EOF; a `GatewayControl`
with a session sends every call through it, and through an exec of its own once it ended.
Run against a real gateway (in-process) with a stand-in for Docker's exec socket."""

from __future__ import annotations

import contextlib
import os
import struct
import subprocess
import sys
import threading
from socket import SHUT_WR, socket, socketpair

from composer.gateway import GatewayControl, Session
from tests.conftest import REPO

from .fakes import LocalExec


class SocketExec(LocalExec):
    """LocalExec plus Docker's `exec_create`/`exec_start(socket=True)`: the process's stdin
    and stdout behind a socket, stdout in Docker's 8-byte frames."""

    def __init__(self, socket_path: str) -> None:
        super().__init__(socket_path)
        self.id = "fake"
        self.client = self
        self.api = self
        self.started: list[list[str]] = []
        self.procs: list[subprocess.Popen[bytes]] = []

    def exec_create(self, container_id: str, cmd: list[str], **_: object) -> dict[str, str]:
        self.started.append(list(cmd))
        return {"Id": str(len(self.started) - 1)}

    def exec_start(self, exec_id: str, socket: bool = False) -> object:
        cmd = self.started[int(exec_id)]
        env = {**os.environ, "PYTHONPATH": str(REPO), "GATEWAY_CONTROL_SOCKET": self.socket_path}
        proc = subprocess.Popen(
            [sys.executable, *cmd[1:]], stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env
        )
        self.procs.append(proc)
        ours, theirs = _socketpair()

        def stdout() -> None:
            assert proc.stdout is not None
            with contextlib.suppress(OSError):  # the host closed its end
                for chunk in iter(lambda: proc.stdout.read1(4096), b""):  # type: ignore[union-attr]
                    theirs.sendall(struct.pack(">BxxxL", 1, len(chunk)) + chunk)
                theirs.shutdown(SHUT_WR)

        def stdin() -> None:
            assert proc.stdin is not None
            with contextlib.suppress(OSError):  # the process ended
                for chunk in iter(lambda: theirs.recv(4096), b""):
                    proc.stdin.write(chunk)
                    proc.stdin.flush()
                proc.stdin.close()

        threading.Thread(target=stdout, daemon=True).start()
        threading.Thread(target=stdin, daemon=True).start()
        return ours


def _socketpair() -> tuple[socket, socket]:
    return socketpair()


def test_a_session_carries_every_call_and_its_end_releases_its_owners_holds(gateway) -> None:
    target = SocketExec(gateway.config.control_socket)
    ctl = GatewayControl(target)
    other = GatewayControl(LocalExec(gateway.config.control_socket))
    theirs = other.hold(60, owner="someone else")
    session = ctl.tether("compose-spec up (pid 1, a)")
    assert isinstance(session, Session) and ctl.session is session
    assert [c[-2:] for c in target.started] == [["session", "--owner=compose-spec up (pid 1, a)"]]
    mine = ctl.hold(60, owner="compose-spec up (pid 1, a)")
    ctl.renew(mine.id, 60)
    assert {h.id for h in ctl.state().holds} == {mine.id, theirs.id}
    assert target.commands == []  # no exec of its own: every call went through the session
    # a call that waits does not hold up the next one (each command runs on its own thread)
    waited: list[object] = []
    waiter = threading.Thread(target=lambda: waited.append(ctl.next_demand(60.0)), daemon=True)
    waiter.start()
    switcher = gateway.gateway.switcher
    gateway.wait(lambda g: switcher._polls == 1)  # the long poll waits in the gateway
    ctl.renew(mine.id, 60)
    assert waiter.is_alive() and not waited  # the renewal came back first
    assert gateway.loop is not None  # then a demand ends the poll (not its 60 s)
    gateway.loop.call_soon_threadsafe(switcher.raise_demand, "mtp", "a test asks", "alias")
    waiter.join(30)
    assert [getattr(demand, "variant", None) for demand in waited] == ["mtp"]
    session.close()  # EOF: the session releases its owner's holds, nobody else's
    target.procs[0].wait(timeout=30)
    assert [h.id for h in other.state().holds] == [theirs.id]
    assert ctl.state().upstream  # the session ended: the next call is an exec of its own
    assert [c[3:] for c in target.commands] == [["GET", "/state"]]
    other.release(theirs.id)


def test_a_bad_command_gets_an_error_line_and_the_session_goes_on(gateway) -> None:
    target = SocketExec(gateway.config.control_socket)
    ctl = GatewayControl(target)
    session = ctl.tether("owner")
    assert isinstance(session, Session)
    bad = (("GET", "tether", None), ("FROB", "/state", None), ("POST", "/renew", {"id": "unknown-id"}))
    for method, path, body in bad:
        code, reply = session.call(method, path, body)
        assert code in {1, 2} and reply.get("error"), (method, path)
    assert session.call("GET", "/state", None)[0] == 0
    session.close()


def test_an_older_gateway_without_sessions_gets_a_plain_tether(gateway) -> None:
    class OldExec(SocketExec):
        def exec_create(self, container_id: str, cmd: list[str], **extra: object) -> dict[str, str]:
            if "session" in cmd:  # what an older ctl does: a usage error, exit 2
                cmd = [*cmd[:3], "no-such-verb"]
            return super().exec_create(container_id, cmd, **extra)

    target = OldExec(gateway.config.control_socket)
    ctl = GatewayControl(target)
    tether = ctl.tether("owner")
    assert tether is not None and not isinstance(tether, Session) and ctl.session is None
    assert [c[3] for c in target.started] == ["no-such-verb", "tether"]
    hold = ctl.hold(60, owner="owner")
    assert [c[3:5] for c in target.commands] == [["POST", "/hold"]]
    tether.close()
    target.procs[-1].wait(timeout=30)
    assert hold.id not in {h.id for h in ctl.state().holds}
