"""Container PIDs from `/proc/<pid>/cgroup`, on a fake /proc tree and on this host's."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from composer.probes.cgroups import container_pids

ID = "963b83d175075dc5419b34280cde51239e50610d1c9835dd1f4ce8545e2d6ee6"
OTHER = "0" * 64


def fake_proc(root: Path, cgroups: dict[str, str]) -> Path:
    for name, text in cgroups.items():
        (root / name).mkdir(parents=True)
        (root / name / "cgroup").write_text(text)
    (root / "self").mkdir()
    return root


def test_pids_of_a_container_under_cgroupfs_systemd_and_rootless_paths(tmp_path: Path) -> None:
    proc = fake_proc(
        tmp_path,
        {
            "10": f"0::/docker/{ID}\n",
            "11": f"0::/system.slice/docker-{ID}.scope\n",
            "12": f"4:memory:/docker/{ID}\n0::/\n",
            "13": f"0::/user.slice/user-1000.slice/user@1000.service/docker-{ID}.scope\n",
            "20": f"0::/docker/{OTHER}\n",
            "21": "0::/user.slice/session-1.scope\n",
        },
    )
    (proc / "22").mkdir()  # a process that ended while we read: no cgroup file
    assert container_pids([ID], proc) == {10, 11, 12, 13}
    assert container_pids([ID, OTHER], proc) == {10, 11, 12, 13, 20}


def test_short_or_no_ids_and_a_missing_proc_find_nothing(tmp_path: Path) -> None:
    proc = fake_proc(tmp_path, {"10": f"0::/docker/{ID}\n"})
    assert container_pids([ID[:8]], proc) == frozenset()
    assert container_pids([], proc) == frozenset()
    assert container_pids([ID], tmp_path / "missing") == frozenset()


def test_this_host_proc_is_readable_and_unrelated_ids_match_nothing() -> None:
    assert os.getpid() not in container_pids([OTHER])


@pytest.mark.docker
def test_a_real_containers_main_process_is_found(docker_client) -> None:
    container = docker_client.containers.run(
        "vllm-composer-base:bookworm",
        ["sleep", "60"],
        detach=True,
        network_mode="none",
        labels={"vllm-composer.test": "cgroups"},
    )
    try:
        container.reload()
        main = int(container.attrs["State"]["Pid"])
        assert main in container_pids([container.id])
        assert main not in container_pids([OTHER])
    finally:
        container.remove(force=True)
