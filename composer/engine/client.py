"""The one place that builds the Docker SDK client and runs the `docker compose` CLI.

Which engine: the one the docker CLI would use, in its order: `--context NAME`
(`select_context`, set once by the command line), then DOCKER_HOST, then DOCKER_CONTEXT,
then the current context of the docker config, then the local socket. The SDK client
and `docker --context NAME compose ...` always talk to the same engine.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from composer.engine import fixes
from composer.errors import ComposerError, DockerUnavailable, UsageError

if TYPE_CHECKING:
    import docker

_selected_context: str | None = None
LOCAL_SCHEMES = ("unix", "npipe", "fd")


def select_context(name: str | None) -> None:
    """Use the Docker context NAME for every client and compose call (None: the default order)."""
    global _selected_context
    _selected_context = name or None


@dataclass(frozen=True)
class Endpoint:
    """The engine in use: the context it came from (None for DOCKER_HOST or the default), its
    host URL and TLS settings."""

    context: str | None
    host: str
    tls: Any = None

    @property
    def remote(self) -> bool:
        """Reached over the network (tcp://, ssh://): host paths and ports are on another machine."""
        return urlsplit(self.host).scheme not in LOCAL_SCHEMES

    @property
    def address(self) -> str | None:
        """The host name clients use to reach ports the engine publishes; None when local."""
        return urlsplit(self.host).hostname if self.remote else None

    def describe(self) -> str:
        where = f"context {self.context} at " if self.context else ""
        return f"{where}{self.host}"


def _context_endpoint(name: str) -> Endpoint:
    """A context's endpoint as the docker CLI stores it (`docker context inspect`; the SDK's
    ContextAPI misses contexts when no config.json exists)."""
    import json

    done = _docker_quiet([docker_binary(), "context", "inspect", name], f"docker context inspect {name}")
    try:
        (info,) = json.loads(done.stdout) if done.returncode == 0 else [None]
        docker_endpoint = info["Endpoints"]["docker"]
    except (ValueError, TypeError, KeyError):
        raise UsageError(
            f"unknown Docker context {name!r}: choose one of {', '.join(known_contexts(name)) or 'default'}"
        ) from None
    return Endpoint(name, docker_endpoint["Host"], _context_tls(info, docker_endpoint))


def _context_tls(info: dict, docker_endpoint: dict) -> Any:
    """The TLS settings a context stores for its docker endpoint (None without TLS material)."""
    if "docker" not in (info.get("TLSMaterial") or {}):
        return None
    from docker.tls import TLSConfig

    folder = Path(info["Storage"]["TLSPath"]) / "docker"
    ca, cert, key = (folder / n for n in ("ca.pem", "cert.pem", "key.pem"))
    return TLSConfig(
        client_cert=(str(cert), str(key)) if cert.exists() else None,
        ca_cert=str(ca) if ca.exists() else None,
        verify=not docker_endpoint.get("SkipTLSVerify", False),
    )


def _docker_quiet(
    argv: list[str], what: str, env: Mapping[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """A short docker CLI query (`what`, in words); never raises for its exit code."""
    try:
        environ = dict(env) if env is not None else None
        return subprocess.run(argv, capture_output=True, text=True, timeout=30, check=False, env=environ)
    except subprocess.TimeoutExpired as err:
        raise DockerUnavailable(f"`{what}` did not answer within 30 s") from err


def known_contexts(missing: str = "") -> list[str]:
    """The contexts the docker CLI stores (the CLI lists DOCKER_CONTEXT's name even when no
    such context exists: it is asked without it, and `missing` is never offered)."""
    env = {k: v for k, v in os.environ.items() if k not in ("DOCKER_CONTEXT", "DOCKER_HOST")}
    argv = [docker_binary(), "context", "ls", "--format", "{{.Name}}"]
    done = _docker_quiet(argv, "docker context ls --format {{.Name}}", env)
    names = {n for n in done.stdout.split() if n != missing} if done.returncode == 0 else set()
    return sorted(names)


DOCKER_HOST_FORMS = (
    "unix:///PATH (e.g. unix:///var/run/docker.sock), tcp://HOST:PORT or npipe:////./pipe/NAME"
)
SSH_BY_CONTEXT = (
    "ssh engines are reached through a Docker context: "
    "`docker context create NAME --docker host=ssh://USER@HOST`, then `--context NAME` "
    "(or DOCKER_CONTEXT=NAME) and unset DOCKER_HOST"
)


def check_docker_host(host: str) -> str:
    """DOCKER_HOST when it names an engine this tool reaches, else UsageError in one line
    naming the allowed forms (ssh:// is reached through a context: the SDK needs paramiko)."""
    bad = f"DOCKER_HOST={host!r} is not a Docker engine address: expected {DOCKER_HOST_FORMS}"
    try:
        parts = urlsplit(host.strip())
        parts.port  # noqa: B018  (raises ValueError on a bad port)
    except ValueError:
        raise UsageError(bad) from None
    scheme = parts.scheme.lower()
    if scheme == "ssh":
        raise UsageError(f"DOCKER_HOST={host!r}: {SSH_BY_CONTEXT}")
    if scheme == "tcp" and parts.hostname:
        return host
    if scheme in ("unix", "npipe") and parts.path:
        return host
    raise UsageError(bad)


def engine_endpoint() -> Endpoint:
    """The engine this run talks to (see the module docstring for the order)."""
    if _selected_context:
        return _context_endpoint(_selected_context)
    if os.environ.get("DOCKER_HOST"):
        return Endpoint(None, check_docker_host(os.environ["DOCKER_HOST"]))
    from docker.context.config import get_current_context_name

    name = os.environ.get("DOCKER_CONTEXT") or get_current_context_name()
    if name and name != "default":
        return _context_endpoint(name)
    return Endpoint(None, "unix:///var/run/docker.sock")


def current_endpoint() -> Endpoint | None:
    """The selected engine, or None when it cannot be determined (doctor says why)."""
    try:
        return engine_endpoint()
    except ComposerError:
        return None


def engine_address() -> str | None:
    """The host clients use to reach the selected engine's published ports; None when local."""
    endpoint = current_endpoint()
    return endpoint.address if endpoint else None


def unreachable_reason(err: BaseException) -> str:
    """Why the engine did not answer, in words (no exception names or tuples)."""
    seen: BaseException | None = err
    while seen is not None:
        for item in (seen, *getattr(seen, "args", ())):
            if isinstance(item, FileNotFoundError):
                return "its socket does not exist (is the engine running?)"
            if isinstance(item, PermissionError):
                return (
                    "permission denied on its socket (add your user to the docker group, then log in again)"
                )
            if isinstance(item, ConnectionRefusedError):
                return "the connection was refused (is the engine running?)"
        seen = seen.__cause__ or seen.__context__
    text = str(err).removeprefix("Error while fetching server API version: ")
    return text or "no answer"


def docker_client(timeout: int = 120) -> docker.DockerClient:
    """A client for the selected engine (see `engine_endpoint`), checked with a ping."""
    import docker
    from docker.errors import DockerException

    endpoint = engine_endpoint()
    try:
        if endpoint.context is None:
            client = docker.from_env(timeout=timeout)  # DOCKER_HOST and its TLS variables
        else:
            client = docker.DockerClient(
                base_url=endpoint.host,
                tls=endpoint.tls or False,
                timeout=timeout,
                use_ssh_client=endpoint.host.startswith("ssh://"),
            )
        client.ping()
    except DockerException as err:
        raise DockerUnavailable(
            f"cannot reach the Docker engine ({endpoint.describe()}): {unreachable_reason(err)}; "
            + fixes.start_docker()
        ) from err
    return client


def docker_cli(*args: str) -> list[str]:
    """`docker [--context NAME] ARGS...`: the CLI on the same engine as `docker_client`."""
    context = ["--context", _selected_context] if _selected_context else []
    return [docker_binary(), *context, *args]


def docker_binary() -> str:
    """Path of the docker CLI, or DockerUnavailable."""
    found = shutil.which("docker")
    if not found:
        raise DockerUnavailable(f"the docker CLI is not on PATH: {fixes.install_docker('the docker CLI')}")
    return found


def compose_version() -> str:
    """The Compose v2 plugin's version, or DockerUnavailable."""
    done = _docker_quiet(docker_cli("compose", "version", "--short"), "docker compose version")
    if done.returncode != 0:
        raise DockerUnavailable(
            "the Compose v2 plugin is missing (`docker compose` failed): "
            + fixes.install_docker("the Compose v2 plugin")
        )
    return done.stdout.strip()


def run_detached(
    argv: Sequence[str], env: Mapping[str, str] | None, timeout: float
) -> subprocess.CompletedProcess[str]:
    """Run a command in a session of its own, which the terminal's Ctrl-C never reaches (a
    rollback's `docker compose` finishes even when the user presses it again). Its whole
    process group is killed when the timeout passes or this process stops waiting for it."""
    with subprocess.Popen(
        list(argv),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=dict(env) if env is not None else None,
        start_new_session=True,
    ) as process:
        try:
            stdout, stderr = process.communicate(timeout=timeout)
        except BaseException:  # SIGKILL its process group (led by its pid), then reap it
            with contextlib.suppress(ProcessLookupError):  # the group is gone already
                os.killpg(process.pid, signal.SIGKILL)
            process.communicate()
            raise
    return subprocess.CompletedProcess(process.args, process.returncode, stdout, stderr)


def compose(
    project: str,
    compose_file: Path | None,
    args: Sequence[str],
    env: Mapping[str, str] | None = None,
    timeout: float = 300,
) -> subprocess.CompletedProcess[str]:
    """Run `docker compose -p PROJECT [-f FILE] ARGS...` detached (see run_detached); raise
    ComposerError when it fails or `timeout` s pass."""
    files = ["--file", str(compose_file)] if compose_file is not None else []
    argv = docker_cli("compose", "--project-name", project, *files, *args)
    command = " ".join(args)
    try:
        done = run_detached(argv, env, timeout)
    except subprocess.TimeoutExpired as err:
        raise ComposerError(f"`docker compose {command}` did not finish within {timeout:.0f} s") from err
    if done.returncode != 0:
        message = (done.stderr or done.stdout).strip().splitlines()
        last = message[-1] if message else f"exit code {done.returncode}"
        raise ComposerError(f"`docker compose {command}` failed: {last}")
    return done
