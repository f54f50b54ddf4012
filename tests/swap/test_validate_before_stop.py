"""Everything that would fail after the serving variant stopped is refused before: with
baseline serving on the simulator, each bad `up` exits non-zero and baseline keeps serving
in the very same container (real daemon)."""

from __future__ import annotations

import os
import secrets
import shlex
import signal
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from composer.engine.published_port import DEAD_PORT
from tests.conftest import REPO, free_port, in_ci, isolated_env, remove_project
from tests.swap.conftest import FAILURE_VARIANTS, Stack, running_containers

pytestmark = pytest.mark.docker


@pytest.fixture(scope="module")
def serving(tmp_path_factory, docker_client, sim_images) -> Iterator[Stack]:
    """One stack with baseline serving, shared by the tests of this module."""
    tmp = tmp_path_factory.mktemp("serving")
    project, port = f"vct{uuid.uuid4().hex[:10]}", free_port()
    stack_file = tmp / "test-stack.toml"
    stack_file.write_text(
        f'[stack]\nproject = "{project}"\nport = {port}\nprobation = "0s"\n'
        '[stack.env]\nSIM_LOAD_SECONDS = "0.3"\nSIM_TIME_SCALE = "20"\n' + FAILURE_VARIANTS,
        encoding="utf-8",
    )
    env = isolated_env(tmp)
    stack = Stack(project, port, env["VLLM_API_KEY"], env, stack_file)
    started = stack.run("up", "baseline")
    assert started.returncode == 0, started.stderr
    yield stack
    remove_project(docker_client, project)


def _baseline_id(stack: Stack, client) -> str:
    running = running_containers(client, stack.project)
    assert [c.labels["vllm-composer.variant"] for c in running] == ["baseline"]
    return running[0].id


def assert_refused_and_untouched(stack: Stack, client, *args: str, code: int, env=None) -> str:
    """`up ...` exits `code` with one error line, and baseline's container still runs."""
    before = _baseline_id(stack, client)
    if env is not None:
        stack = Stack(stack.project, stack.port, stack.api_key, {**stack.env, **env}, stack.stack_file)
    done = stack.run(*args)
    assert done.returncode == code, (done.stdout, done.stderr)
    errors = [line for line in done.stderr.splitlines() if line.startswith("compose-spec: error: ")]
    assert len(errors) == 1, done.stderr
    assert not [line for line in done.stderr.splitlines() if line.startswith("stopping ")], "nothing stops"
    assert _baseline_id(stack, client) == before
    return errors[0]


# -- 11. the port held by another compose-spec project's container ------------------------------
def test_port_held_by_another_project_is_refused_before_stopping(serving: Stack, docker_client) -> None:
    other, port = f"vct{uuid.uuid4().hex[:10]}", free_port()
    labels = {
        "vllm-composer.port": str(port),
        "vllm-composer.variant": "baseline",
        "com.docker.compose.project": other,
        "com.docker.compose.service": "vllm",
        "vllm-composer.test": "swap",
    }
    holder = docker_client.containers.run(
        "vllm-sim:latest",
        entrypoint=["sleep", "120"],
        labels=labels,
        detach=True,
        ports={"8000/tcp": ("127.0.0.1", port)},
        name=f"{other}-vllm-1",
    )
    try:
        line = assert_refused_and_untouched(
            serving, docker_client, "--set", f"stack.port={port}", "up", "mtp", code=1
        )
        assert f"compose project {other!r}" in line
    finally:
        holder.remove(force=True)


# -- 12. the rollback target's image is gone ---------------------------------------------------
def test_missing_rollback_image_is_refused_before_stopping(tmp_path, docker_client, sim_images) -> None:
    tag = f"vct-rollback-{uuid.uuid4().hex[:8]}:gone"
    docker_client.images.get("vllm-sim:latest").tag(tag)
    project, port = f"vct{uuid.uuid4().hex[:10]}", free_port()
    stack_file = tmp_path / "test-stack.toml"
    stack_file.write_text(
        f'[stack]\nproject = "{project}"\nport = {port}\nprobation = "0s"\n'
        '[stack.env]\nSIM_LOAD_SECONDS = "0.3"\nSIM_TIME_SCALE = "20"\n',
        encoding="utf-8",
    )
    env = {k: v for k, v in os.environ.items() if k not in {"VLLM_PORT", "COMPOSE_PROJECT_NAME"}}
    env.update(
        VLLM_API_KEY=secrets.token_urlsafe(24),
        VLLM_IMAGE=tag,
        XDG_STATE_HOME=str(tmp_path / "state"),
        XDG_RUNTIME_DIR=str(tmp_path),
        PYTHONPATH=str(REPO),
    )
    stack = Stack(project, port, env["VLLM_API_KEY"], env, stack_file)
    try:
        assert stack.run("up", "baseline").returncode == 0
        docker_client.images.remove(tag)  # untag only: the running container keeps its layers
        line = assert_refused_and_untouched(stack, docker_client, "up", "dflash2", code=1)
        assert f"the image {tag} of the serving variant baseline is no longer present" in line
        assert "--no-rollback" in line
    finally:
        remove_project(docker_client, project)
        if docker_client.images.list(name=tag.split(":")[0]):
            docker_client.images.remove(tag)


# -- 26. K beyond what vLLM accepts -------------------------------------------------------------
def test_huge_k_is_refused_before_stopping(serving: Stack, docker_client) -> None:
    line = assert_refused_and_untouched(
        serving,
        docker_client,
        "--set",
        "variants.mtp.speculative.num_speculative_tokens=1000000000",
        "up",
        "mtp",
        code=2,
    )
    assert "a positive integer up to 128" in line


def test_dflash_k_beyond_the_trained_block_is_refused_before_stopping(serving: Stack, docker_client) -> None:
    line = assert_refused_and_untouched(
        serving, docker_client, "up", "dflash2", code=1, env={"NUM_SPECULATIVE_TOKENS": "9"}
    )
    assert "block_size 8 allows K up to 7" in line


# -- 27. what Docker or compose would refuse ----------------------------------------------------
@pytest.mark.parametrize(
    "setting",
    ["stack.model_path=/", "stack.model_path=/models/../etc", "stack.start_period=99999999999h"],
)
def test_docker_refusals_are_refused_before_stopping(serving: Stack, docker_client, setting: str) -> None:
    line = assert_refused_and_untouched(serving, docker_client, "--set", setting, "up", "mtp", code=2)
    assert setting.split("=")[0] in line


# -- 7. two mounts on one container path ----------------------------------------------------
def test_shared_mount_target_is_refused_before_stopping(serving: Stack, docker_client) -> None:
    line = assert_refused_and_untouched(
        serving, docker_client, "--set", "stack.draft_path=/models/Qwen3.8-27B", "up", "dflash2", code=2
    )
    assert "equals stack.model_path" in line


# -- 9 and 28. keys ---------------------------------------------------------------------------
def test_non_ascii_key_is_refused_before_stopping(serving: Stack, docker_client) -> None:
    key = "sk-schlüssel-0123456789abcdef"
    line = assert_refused_and_untouched(
        serving, docker_client, "up", "mtp", code=2, env={"VLLM_API_KEY": key}
    )
    assert "invalid VLLM_API_KEY" in line and key not in line


def test_one_character_key_is_refused_before_stopping(serving: Stack, docker_client) -> None:
    line = assert_refused_and_untouched(
        serving, docker_client, "up", "mtp", code=2, env={"VLLM_API_KEY": "k"}
    )
    assert "VLLM_API_KEY is too easy to guess" in line and "--allow-weak-key" in line


def test_port_beyond_loopback_is_a_warning(serving: Stack, docker_client) -> None:
    """doctor runs the same fast checks as the preflight of `up`."""
    done = serving.run("--set", "stack.bind_address=0.0.0.0", "doctor", "baseline")
    assert "bind-address" in done.stdout and "beyond loopback" in done.stdout


# -- issue 22. Docker's port proxy for the published port is gone --------------------------------
def _docker_proxy_pids(port: int) -> list[int]:
    """The docker-proxy processes (Docker's userland proxy) that publish `port` on the host."""
    found = []
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            argv = cmdline.read_bytes().split(b"\0")
        except OSError:
            continue
        proxy = argv[0].endswith(b"docker-proxy") and b"-host-port" in argv
        if proxy and argv[argv.index(b"-host-port") + 1] == str(port).encode():
            found.append(int(cmdline.parent.name))
    return found


def _dnat_rules(port: int) -> list[str]:
    """The engine's DNAT rules for `port` (how a dockerd without its userland proxy publishes)."""
    listed = subprocess.run(["iptables", "-t", "nat", "-S", "DOCKER"], capture_output=True, text=True)
    return [
        line
        for line in listed.stdout.splitlines()
        if line.startswith("-A DOCKER ") and f"--dport {port} " in line and "-j DNAT" in line
    ]


def _break_port_publication(port: int) -> None:
    """Take away the engine's publication of `port` while every container keeps running: what
    a flood of half-open connections did to Docker's userland proxy in issue 22. With the
    proxy, its process is killed; without it (iptables forwarding), its DNAT rule is deleted.
    Clients then get "connection refused", or (dockerd's reservation of the port) no answer."""
    pids = _docker_proxy_pids(port)
    for pid in pids:
        os.kill(pid, signal.SIGTERM)
    rules = [] if pids else _dnat_rules(port)
    for rule in rules:
        subprocess.run(["iptables", "-t", "nat", "-D", *shlex.split(rule)[1:]], check=True)
    if not pids and not rules:
        reason = f"neither a docker-proxy nor a DNAT rule publishes port {port}"
        if in_ci():
            pytest.fail(reason)
        pytest.skip(reason)
    with pytest.raises((httpx.ConnectError, httpx.ReadTimeout)):
        httpx.get(f"http://127.0.0.1:{port}/gateway/health", timeout=5)


def _gateway_id(stack: Stack, client) -> str:
    (gateway,) = client.containers.list(
        filters={"label": [f"com.docker.compose.project={stack.project}", "vllm-composer.role=gateway"]}
    )
    return gateway.id


def test_a_dead_published_port_is_named_and_brought_back_without_restarting_the_variant(
    serving: Stack, docker_client
) -> None:
    """Last in this module: it replaces the gateway (the variant keeps serving)."""
    variant, gateway = _baseline_id(serving, docker_client), _gateway_id(serving, docker_client)
    _break_port_publication(serving.port)

    status = serving.run("status")
    assert status.returncode == 0, status.stderr
    assert f"health        {DEAD_PORT}" in status.stdout and "not listening yet" not in status.stdout
    assert serving.status()["health"] == "unreachable"
    doctor = serving.run("doctor", "baseline")
    assert doctor.returncode == 1 and f"fail  port: {DEAD_PORT}" in doctor.stdout
    assert "is free" not in doctor.stdout

    line = assert_refused_and_untouched(serving, docker_client, "up", "baseline", code=1)
    assert DEAD_PORT in line

    recreated = serving.run("up", "--recreate-gateway")
    assert recreated.returncode == 0, recreated.stderr
    assert "baseline serves through it again" in recreated.stdout
    # Docker's forwarding belongs to the port holder: it is recreated too
    assert (
        "gateway recreated and its port holder (Docker's forwarding of the port was gone)" in recreated.stdout
    )
    assert _baseline_id(serving, docker_client) == variant, "the variant kept running"
    assert _gateway_id(serving, docker_client) != gateway
    reply = httpx.get(
        f"http://127.0.0.1:{serving.port}/v1/models",
        headers={"Authorization": f"Bearer {serving.api_key}"},
        timeout=10,
    )
    assert reply.status_code == 200
    again = serving.run("up", "baseline")
    assert again.returncode == 0 and "unchanged" in again.stdout, again.stderr
    assert serving.status()["health"] == "ready"
