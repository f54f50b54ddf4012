"""VariantContainer: the one owner of every Docker verb on a variant's container (stop and
remove, why it stopped serving, its log, whether it sleeps), and RunningVariant: what its
labels and state say about it."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING

from composer import labels as label_names
from composer.engine import retry
from composer.engine.retry import Pending
from composer.errors import ComposerError
from composer.render.spec import CONTAINER_PORT, SLEEP_MODE_FLAG, Owner

if TYPE_CHECKING:
    from docker.errors import APIError
    from docker.models.containers import Container


REMOVAL_WAIT = 30.0  # seconds a container being removed by Docker may take to disappear
# Asked inside the container (its image has python3): vLLM's own `/is_sleeping` answer.
_IS_SLEEPING = (
    "import json, urllib.request; "
    f"print(json.load(urllib.request.urlopen('http://127.0.0.1:{CONTAINER_PORT}/is_sleeping', timeout=3))"
    "['is_sleeping'])"
)


@dataclass(frozen=True)
class RunningVariant:
    """A variant container as Docker reports it."""

    container_id: str
    name: str
    variant: str
    config_hash: str
    image: str
    status: str
    docker_health: str | None
    started_at: datetime | None
    port: int | None
    served_name: str
    config_file: str | None
    restart_count: int
    exit_code: int | None = None
    finished_at: datetime | None = None
    service: str | None = None  # the compose service that created it (None: launcher)
    sleep_mode: bool = False  # started with --enable-sleep-mode: it can be put to sleep
    restart_policy: str = ""  # Docker's restart policy now (`no` while it is parked asleep)
    owner: Owner | None = None  # the stack that started it, from its labels (None: not recorded)

    @property
    def running(self) -> bool:
        return self.status == "running"

    def uptime_seconds(self) -> float | None:
        """Seconds since the container started, when running."""
        if not self.running or self.started_at is None:
            return None
        return (datetime.now(UTC) - self.started_at).total_seconds()


def _started_at(raw: str | None) -> datetime | None:
    """A Docker timestamp as a UTC datetime (None for Docker's zero time)."""
    if not raw or raw.startswith("0001-"):
        return None
    trimmed = raw.rstrip("Z").split(".")[0]
    return datetime.fromisoformat(trimmed).replace(tzinfo=UTC)


def _restarted(attrs: dict) -> bool:
    """Docker is restarting the container, or has restarted it before."""
    return bool(attrs.get("State", {}).get("Restarting")) or int(attrs.get("RestartCount", 0) or 0) > 0


def removal_in_progress(err: APIError) -> bool:
    """Docker's 409 for a container that is already being removed (e.g. `docker run --rm`)."""
    text = str(err.explanation or err).lower()
    return err.status_code == 409 and ("already in progress" in text or "marked for removal" in text)


class VariantContainer:
    """A variant container of the project, wrapping the Docker SDK's Container."""

    def __init__(self, container: Container) -> None:
        self.container = container

    @property
    def name(self) -> str:
        return self.container.name or ""

    @property
    def status(self) -> str:
        return self.container.status

    def describe(self) -> RunningVariant:
        """What the labels and the state say about it."""
        attrs = self.container.attrs
        config = attrs.get("Config") or {}
        labels = config.get("Labels") or {}
        argv = [str(word) for word in (config.get("Entrypoint") or []) + (config.get("Cmd") or [])]
        state = attrs.get("State", {})
        policy = (attrs.get("HostConfig") or {}).get("RestartPolicy") or {}
        port = labels.get(label_names.PORT)
        files = labels.get(label_names.COMPOSE_CONFIG_FILES)
        return RunningVariant(
            container_id=self.container.id or "",
            name=self.container.name or "",
            variant=labels.get(label_names.VARIANT, "?"),
            config_hash=labels.get(label_names.CONFIG_HASH, ""),
            image=config.get("Image", ""),
            status=state.get("Status", "unknown"),
            docker_health=(state.get("Health") or {}).get("Status"),
            started_at=_started_at(state.get("StartedAt")),
            port=int(port) if port and port.isdigit() else None,
            served_name=labels.get(label_names.SERVED_NAME, ""),
            config_file=files.split(",")[0] if files else None,
            restart_count=int(attrs.get("RestartCount", 0) or 0),
            exit_code=state.get("ExitCode") if isinstance(state.get("ExitCode"), int) else None,
            finished_at=_started_at(state.get("FinishedAt")),
            service=labels.get(label_names.COMPOSE_SERVICE),
            sleep_mode=SLEEP_MODE_FLAG in argv,
            restart_policy=str(policy.get("Name") or ""),
            owner=Owner.from_labels(labels),
        )

    def is_sleeping(self) -> bool | None:
        """Its own `GET /is_sleeping` answer, asked inside it (`docker exec`): the one record of
        whether it sleeps (`/health` is 200 while asleep); None when it does not answer."""
        try:
            code, output = self.container.exec_run(["python3", "-c", _IS_SLEEPING])
        except Exception:  # the Docker SDK raises several families; no answer either way
            return None
        words = (output or b"").decode(errors="replace").split()
        return {"True": True, "False": False}.get(words[-1]) if code == 0 and words else None

    def stop_and_remove(self, grace_seconds: int) -> None:
        """Stop (SIGTERM, then kill after the grace period) and remove; gone already is fine,
        and one Docker is removing already (`docker run --rm`: 409) is waited for."""
        from docker.errors import APIError, NotFound

        try:
            self.container.stop(timeout=grace_seconds)
            self.container.remove(force=True)
        except NotFound:  # already gone
            return
        except APIError as err:
            if not removal_in_progress(err):
                raise ComposerError(f"could not stop {self.name}: {err}") from err
            self.wait_gone(REMOVAL_WAIT)
        except Exception as err:
            raise ComposerError(f"could not stop {self.name}: {err}") from err

    def wait_gone(self, timeout: float) -> None:
        """Poll until Docker no longer knows the container; ComposerError after `timeout` s."""
        from docker.errors import NotFound

        def attempt() -> None:
            try:
                self.container.reload()
            except NotFound:
                return
            except Exception as err:
                raise ComposerError(f"could not stop {self.name}: {err}") from err
            raise Pending(f"{self.name} is still being removed after {timeout:.0f} s")

        try:
            retry.removal(timeout)(attempt)
        except Pending as still_there:
            raise ComposerError(str(still_there)) from None

    def exit_reason(self) -> str | None:
        """Why the container stopped serving (exited, dead or restarted), or None while it runs."""
        self.container.reload()
        attrs = self.container.attrs
        state = attrs.get("State", {})
        if state.get("Status") in {"exited", "dead"}:
            return f"the container exited with code {state.get('ExitCode')}"
        if _restarted(attrs):
            codes = [code for _, code in self._deaths(attrs) or ()]
            code = codes[-1] if codes and codes[-1] is not None else state.get("ExitCode")
            return f"the container exited with code {code} and was restarted"
        return None

    def _deaths(self, attrs: dict) -> list[tuple[float | None, object]] | None:
        """(unix seconds, exit code) of each of its `die` events since it was created, oldest
        first; None when the daemon cannot list them. Docker resets `State.ExitCode` to 0 once
        a restart runs it again, so the last exit's code comes from here."""
        try:
            created = datetime.strptime(attrs["Created"][:19], "%Y-%m-%dT%H:%M:%S")
            events = self.container.client.events(
                since=created.replace(tzinfo=UTC),
                until=datetime.now(UTC) + timedelta(seconds=1),
                filters={"container": self.container.id, "event": "die"},
                decode=True,
            )
            return [
                (
                    int(event["timeNano"]) / 1e9 if event.get("timeNano") else None,
                    event.get("Actor", {}).get("Attributes", {}).get("exitCode"),
                )
                for event in events
            ]
        except Exception:  # events unavailable (the daemon went away)
            return None

    def first_run_log(self, tail: int | None = None) -> str:
        """The log of its first run only (the last `tail` lines of it): a failure the restart
        policy restarted shows its boot once, not each restart's boot after it."""
        try:
            self.container.reload()
            attrs = self.container.attrs
        except Exception:  # removed under us
            return ""
        times = [at for at, _ in self._deaths(attrs) or () if at is not None] if _restarted(attrs) else []
        if not times:
            return self.log(tail)
        # Docker restarts no sooner than 100 ms after a death: until then it is the first run
        # (`tail` is cut here, not by Docker, which cuts it before `until`)
        try:
            raw = self.container.logs(tail="all", until=min(times) + 0.05)
        except Exception:
            return ""
        lines = raw.decode(errors="replace").splitlines(keepends=True)
        return "".join(lines if tail is None else lines[-tail:] if tail else [])

    def log(self, tail: int | None = None, since: datetime | None = None, timestamps: bool = False) -> str:
        """Its log (all of it, or the last `tail` lines, since a time); empty when it is gone."""
        try:
            raw = self.container.logs(**_log_args(tail, since, timestamps))
        except Exception:  # removed under us
            return ""
        return raw.decode(errors="replace")

    def follow(
        self, tail: int | None, since: datetime | None = None, timestamps: bool = False
    ) -> Iterator[str]:
        """The last `tail` lines (all with None), then new lines as they come, until it stops."""
        for chunk in self.container.logs(stream=True, follow=True, **_log_args(tail, since, timestamps)):
            yield chunk.decode(errors="replace")


def _log_args(tail: int | None, since: datetime | None, timestamps: bool) -> dict[str, object]:
    """Keyword arguments of the SDK's `logs` (it takes `tail="all"`, and `since` as a datetime)."""
    args: dict[str, object] = {"tail": "all" if tail is None else tail, "timestamps": timestamps}
    if since is not None:
        args["since"] = since
    return args
