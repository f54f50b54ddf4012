"""VariantContainer: the one owner of every Docker verb on a variant's container.

Stop and remove (grace period, then kill; a container already gone or being removed
counts as stopped), why it stopped serving, its log (whole, a tail, or followed), and
its description from labels. Nothing else in the package calls these verbs directly.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime
from typing import TYPE_CHECKING

from composer.errors import ComposerError

if TYPE_CHECKING:
    from docker.models.containers import Container

    from composer.engine.containers import RunningVariant


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
        from composer.engine.containers import describe

        return describe(self.container)

    def stop_and_remove(self, grace_seconds: int) -> None:
        """Stop (SIGTERM, then kill after the grace period) and remove; gone already is fine."""
        from docker.errors import NotFound

        try:
            self.container.stop(timeout=grace_seconds)
            self.container.remove(force=True)
        except NotFound:  # already gone
            return
        except Exception as err:
            raise ComposerError(f"could not stop {self.name}: {err}") from err

    def exit_reason(self) -> str | None:
        """Why the container stopped serving (exited, dead or restarted), or None while it runs."""
        self.container.reload()
        attrs = self.container.attrs
        state = attrs.get("State", {})
        if state.get("Status") in {"exited", "dead"}:
            return f"the container exited with code {state.get('ExitCode')}"
        if state.get("Restarting") or int(attrs.get("RestartCount", 0) or 0) > 0:
            return f"the container exited with code {state.get('ExitCode')} and was restarted"
        return None

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
