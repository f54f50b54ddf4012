"""Shared fixtures: the Docker daemon (never silently skipped in CI) and test isolation."""

from __future__ import annotations

import contextlib
import os
import random
import secrets
import socket
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from hypothesis import settings

REPO = Path(__file__).resolve().parent.parent


def _share_ssl_contexts() -> None:
    """httpx builds a new SSL context for each client it makes (every CA certificate loaded
    again: 30 to 80 ms of CPU), and the tests make thousands of plain-HTTP clients (each
    `httpx.get`, each SDK client, two per in-process gateway): one context per setting, shared.
    Nothing here speaks TLS; where httpx's internals differ, nothing is changed."""
    try:
        import httpx._config as config
        import httpx._transports.default as transports
    except ImportError:
        return
    original = getattr(config, "create_ssl_context", None)
    if original is None or getattr(transports, "create_ssl_context", None) is not original:
        return
    made: dict[tuple[bool, bool], Any] = {}

    def shared(verify: Any = True, cert: Any = None, trust_env: bool = True) -> Any:
        if not isinstance(verify, bool) or cert is not None:
            return original(verify, cert, trust_env)
        if (verify, trust_env) not in made:
            made[(verify, trust_env)] = original(verify, cert, trust_env)
        return made[(verify, trust_env)]

    config.create_ssl_context = shared
    transports.create_ssl_context = shared


_share_ssl_contexts()

FAST_PROFILE = "fast"
settings.register_profile(FAST_PROFILE, max_examples=50)
"""make check's Hypothesis profile (`--hypothesis-profile=fast`): property tests try fewer
examples there; make test tries each test's full count."""


def examples(full: int) -> int:
    """A property test's example count: `full`, or at most the fast profile's under it."""
    if settings.get_current_profile_name() == FAST_PROFILE:
        return min(full, settings.get_profile(FAST_PROFILE).max_examples)
    return full


def shipped_variants() -> tuple[str, ...]:
    """The variants of the shipped composer.toml in their order (tests derive counts from it)."""
    import tomllib

    return tuple(tomllib.loads((REPO / "composer.toml").read_text(encoding="utf-8"))["variants"])


TEST_LABEL = "vllm-composer.test"
# The command line of this environment, never whatever `compose-spec` is on PATH.
COMPOSE_SPEC = (sys.executable, "-m", "composer")


class StackCli:
    """`compose-spec` run as a subprocess (the CLI a user runs) against the repository's
    composer.toml plus a test's own stack file, in the test's environment."""

    env: dict[str, str]
    stack_file: Path
    run_timeout: float = 120

    def args(self, *extra: str) -> list[str]:
        argv = [*COMPOSE_SPEC, "--env-file", str(REPO / ".env.demo")]
        return [*argv, "--stack", str(REPO / "composer.toml"), "--stack", str(self.stack_file), *extra]

    def run(self, *extra: str, timeout: float | None = None) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            self.args(*extra),
            capture_output=True,
            text=True,
            env=self.env,
            cwd=REPO,
            timeout=self.run_timeout if timeout is None else timeout,
        )

    def popen(self, *extra: str, env: dict[str, str] | None = None) -> subprocess.Popen[str]:
        return subprocess.Popen(
            self.args(*extra),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=self.env if env is None else env,
            cwd=REPO,
        )


@contextlib.contextmanager
def answering(ok_path: str | None = None, body: bytes = b"") -> Iterator[int]:
    """A local HTTP server on a port of its own (yielded): a GET gets 200 and `body` on `ok_path`
    (every path when None), 404 elsewhere."""

    class Answer(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(200 if ok_path in (None, self.path) else 404)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            return None

    server = ThreadingHTTPServer(("127.0.0.1", 0), Answer)
    # polled every 20 ms for the shutdown: the default 0.5 s is paid again by every test
    threading.Thread(target=server.serve_forever, args=(0.02,), daemon=True).start()
    try:
        yield server.server_address[1]
    finally:
        server.shutdown()
        server.server_close()


def in_ci() -> bool:
    """True when running under CI (CI=true): Docker tests must run, not skip."""
    return os.environ.get("CI", "").lower() in {"1", "true", "yes"}


def _docker_or_reason():
    try:
        import docker

        client = docker.from_env(timeout=30)
        client.ping()
        return client, ""
    except Exception as err:  # any failure means "no usable daemon"
        return None, f"Docker is not reachable: {err}"


@pytest.fixture(scope="session")
def docker_client():
    """A Docker SDK client; fails under CI=true when the daemon is missing, else skips."""
    client, reason = _docker_or_reason()
    if client is None:
        if in_ci():
            pytest.fail(f"{reason} (CI=true: Docker tests must not skip)")
        pytest.skip(reason)
    yield client
    client.close()


MIGRATE = Path("/proc/sys/net/ipv4/tcp_migrate_req")
"""A kernel setting the gateway hand-over tests turn on (tests/gateway/test_handover.py)."""


ENV_VARS_READ = (
    "COMPOSE_PROJECT_NAME",
    "SERVED_MODEL_NAME",
    "VLLM_PORT",
    "VLLM_BIND_ADDRESS",
    "TENSOR_PARALLEL_SIZE",
    "MAX_MODEL_LEN",
    "GPU_DEVICES",
    "ATTENTION_BACKEND",
    "MODEL_DIR",
    "DRAFT_DIR",
    "KV_CACHE_MEMORY",
    "NUM_SPECULATIVE_TOKENS",
    "VLLM_API_KEY",
    "COMPOSER_STACK",
)
"""The variables a stack reads from the environment (its host values, the key, the stack file)."""

SHELL_VARS = frozenset(
    {
        *ENV_VARS_READ,
        "COMPOSE_FILE",
        "COMPOSE_PROFILES",
        "COMPOSE_ENV_FILES",
        "COMPOSE_SPEC_DEBUG",
        "VLLM_COMPOSER_LOCK_DIR",
        "KUBECONFIG",
    }
)
"""What a user's shell may export that compose-spec, compose or vLLM's docs make it read (the
key, the project, the stack's host values, debug and lock settings): no test sees the shell's
value; a test that needs one sets it. The `COMPOSER_` variables go too (`shell_var`)."""

ENGINE_VARS = ("DOCKER_HOST", "DOCKER_CONTEXT", "DOCKER_TLS_VERIFY", "DOCKER_CERT_PATH")
"""How the shell reaches its Docker engine: kept for the tests marked `docker` (the engine they
use), gone for the others, which never reach one."""


def shell_var(name: str) -> bool:
    """True for a variable of the user's shell that no test may inherit."""
    return name in SHELL_VARS or name.startswith("COMPOSER_")


def pytest_configure(config: pytest.Config) -> None:
    # before collection, so that no module reads them at import either; xdist workers inherit it
    for name in [name for name in os.environ if shell_var(name)]:
        config.stash.setdefault(_SHELL_BEFORE, {})[name] = os.environ.pop(name)
    if not hasattr(config, "workerinput"):  # the session itself, not an xdist worker
        with contextlib.suppress(OSError):
            config.stash[_MIGRATE_BEFORE] = MIGRATE.read_text().strip()


def pytest_unconfigure(config: pytest.Config) -> None:
    """Restore what the hand-over tests changed, once every worker has ended."""
    os.environ.update(config.stash.get(_SHELL_BEFORE, {}))
    before = config.stash.get(_MIGRATE_BEFORE, None)
    with contextlib.suppress(OSError):
        if before is not None and MIGRATE.read_text().strip() != before:
            MIGRATE.write_text(before)


_MIGRATE_BEFORE = pytest.StashKey[str]()
_SHELL_BEFORE = pytest.StashKey[dict[str, str]]()


@pytest.fixture(autouse=True)
def _shell_isolated(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each test starts from an environment the user's shell cannot change: none of the shell's
    variables (`shell_var`, even one set since the session began) and, outside the `docker`
    tier, neither its engine (`ENGINE_VARS`) nor its image overrides (`*_IMAGE`)."""
    engine = request.node.get_closest_marker("docker") is not None
    for name in list(os.environ):
        if shell_var(name) or (not engine and (name in ENGINE_VARS or name.endswith("_IMAGE"))):
            monkeypatch.delenv(name)


@pytest.fixture
def default_sighup() -> Iterator[None]:
    """SIGHUP at its default for one test (and the processes it starts), whatever the session
    inherited: under `nohup`, `screen` or some CI runners it is ignored, and an ignored SIGHUP
    stays ignored by design (composer.signals)."""
    import signal

    before = signal.signal(signal.SIGHUP, signal.SIG_DFL)
    try:
        yield
    finally:
        signal.signal(signal.SIGHUP, before)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The tiers: `pytest -m "not docker"` (make check) runs every test that needs no Docker
    engine and no image; `pytest` (make test) runs them all.

    Every test marked `docker` gets the docker_client fixture, so it cannot skip in CI; a
    test that reaches the daemon (docker_client, directly or through another fixture) or
    runs real vLLM (`vllm_cpu`) without the `docker` marker is a collection error, so the
    fast tier never needs the daemon.

    The real-vLLM tier comes first (the order inside it kept): under `--dist loadfile` it is
    the longest unit of work, so the other worker takes the rest meanwhile.
    """
    items.sort(key=lambda item: not item.get_closest_marker("vllm_cpu"))
    unmarked = []
    for item in items:
        fixtures = getattr(item, "fixturenames", [])
        if item.get_closest_marker("docker"):
            if "docker_client" not in fixtures:
                item.fixturenames.append("docker_client")  # type: ignore[attr-defined]
        elif "docker_client" in fixtures or item.get_closest_marker("vllm_cpu"):
            unmarked.append(item.nodeid)
    if unmarked:
        listed = "\n  ".join(unmarked)
        raise pytest.UsageError(
            f"these tests need the Docker engine but are not marked @pytest.mark.docker:\n  {listed}"
        )


VLLM_TIER = "tests/vllm_cpu/"


def work_unit(nodeid: str) -> str:
    """What one worker runs whole under `--dist loadfile`: a test module, whose tests share
    one stack, or the whole real-vLLM tier, whose modules share one stack of real vLLM."""
    path = nodeid.split("::", 1)[0]
    return VLLM_TIER if path.startswith(VLLM_TIER) else path


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """`--dist loadfile` by `work_unit` (make test's Docker pass): no stack starts twice."""
    if config.getvalue("dist") != "loadfile":
        return None
    from xdist.scheduler import LoadScopeScheduling

    class ByWorkUnit(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return work_unit(nodeid)

    return ByWorkUnit(config, log)


class FakeClock:
    """A monotonic clock that `sleep` advances and records: a wait's timing without waiting."""

    def __init__(self) -> None:
        self.now = 100.0
        self.slept: list[float] = []

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.now += seconds


def free_port(ports: tuple[int, int] | None = None) -> int:
    """A TCP port free on 127.0.0.1 right now: inside `ports` (first, last) when given, else
    inside TEST_PORT_RANGE=LOW-HIGH when set (RuntimeError when none is free), else any; never
    one it handed out before in this process (until most of the range has been)."""
    low, _, high = os.environ.get("TEST_PORT_RANGE", "").partition("-")
    if ports is None and low and high:
        ports = _worker_share((int(low), int(high)))
    if ports is None:
        # outside the kernel's ephemeral range: a port taken from it (bind to port 0) can go to
        # some process's outgoing connection before the test's server binds it; above it, clear
        # of the fixed ranges of the Docker labs (18xxx)
        first_ephemeral, last_ephemeral = _ephemeral_ports()
        if last_ephemeral <= 63535:
            ports = _worker_share((last_ephemeral + 1, 65535))
        elif first_ephemeral > 22000:
            ports = _worker_share((20000, first_ephemeral - 1))
    if ports is not None:
        first, last = ports
        candidates = range(first, last + 1)
        if len(_issued.intersection(candidates)) * 2 > len(candidates):
            _issued.difference_update(candidates)  # most of the range handed out: start over
        for port in random.sample(candidates, len(candidates)):
            if port in _issued:
                continue
            with socket.socket() as sock:
                try:
                    sock.bind(("127.0.0.1", port))
                except OSError:
                    continue
            _issued.add(port)
            return port
        raise RuntimeError(f"no free port in {first}-{last}")
    while True:  # the kernel's pick, from its ephemeral range (it covers every port here)
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            port = sock.getsockname()[1]
        if port not in _issued:
            _issued.add(port)
            return port


_issued: set[int] = set()
"""Ports free_port handed out in this process: a port is free until its test binds it, so two
calls before the first bind (a test's two stacks) could otherwise get the same one; and a port a
finished test used may still be held by a container Docker is removing."""


def _worker_share(ports: tuple[int, int]) -> tuple[int, int]:
    """This pytest-xdist worker's own slice of `ports`: `_issued` is per process, so two
    workers drawing from one range could hand out the same port (one test's dead port served
    by another's server)."""
    worker = os.environ.get("PYTEST_XDIST_WORKER", "")
    count = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1") or 1)
    if not worker.startswith("gw") or count < 2:
        return ports
    first, last = ports
    share = (last - first + 1) // count
    index = int(worker[2:]) % count
    return first + index * share, first + (index + 1) * share - 1


def _ephemeral_ports() -> tuple[int, int]:
    """The kernel's ephemeral port range (Linux's default when it cannot be read)."""
    try:
        first, last = Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()
        return int(first), int(last)
    except (OSError, ValueError):
        return 32768, 60999


HOST_VARS = {"VLLM_PORT", "COMPOSE_PROJECT_NAME", "MODEL_DIR", "DRAFT_DIR", "VLLM_IMAGE", "COMPOSER_STACK"}
"""Host variables that would override a test stack's own settings."""


def isolated_env(state: Path, key_bytes: int = 24) -> dict[str, str]:
    """This process's environment without HOST_VARS, with a fresh API key, the state and
    runtime directories under `state` and this checkout on PYTHONPATH."""
    env = {k: v for k, v in os.environ.items() if k not in HOST_VARS}
    env.update(
        VLLM_API_KEY=secrets.token_urlsafe(key_bytes),
        XDG_STATE_HOME=str(state / "state"),
        XDG_RUNTIME_DIR=str(state),
        PYTHONPATH=str(REPO),
    )
    return env


def remove_containers(client, filters: dict | None = None) -> None:
    """Remove every container (running or not) that matches `filters`; one that is gone before
    its turn (removed by its own process, by Docker or by compose) is not an error."""
    import docker

    for container in client.containers.list(all=True, filters=filters or {}, ignore_removed=True):
        with contextlib.suppress(docker.errors.NotFound):
            container.remove(force=True)


def remove_networks(client, filters: dict) -> None:
    """Remove every network that matches `filters`; one already gone is not an error."""
    import docker

    for network in client.networks.list(filters=filters):
        with contextlib.suppress(docker.errors.NotFound):
            network.remove()


def remove_project(client, project: str) -> None:
    """Remove every container, network and volume (the gateway's state) of a compose project;
    what is already gone is not an error."""
    selector = {"label": f"com.docker.compose.project={project}"}
    remove_containers(client, selector)
    remove_networks(client, selector)
    for volume in client.volumes.list(filters=selector):
        _remove_volume(client, volume)


def _remove_volume(client, volume, attempts: int = 20) -> None:
    """Remove a volume; while Docker says it is in use (a container still being created or
    removed when the project was listed), remove the containers that use it and try again."""
    import docker

    for attempt in range(attempts):
        try:
            volume.remove(force=True)
            return
        except docker.errors.NotFound:
            return
        except docker.errors.APIError as err:
            if err.status_code != 409 or attempt == attempts - 1:
                raise
        remove_containers(client, {"volume": volume.name})
        time.sleep(0.5)


@pytest.fixture
def project_name() -> Iterator[str]:
    """A unique compose project name for one test."""
    yield f"{os.environ.get('TEST_PROJECT_PREFIX', 'vct')}{uuid.uuid4().hex[:10]}"
