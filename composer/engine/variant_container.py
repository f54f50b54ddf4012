"""VariantContainer: the one owner of every Docker verb on a variant's container.

Stop and remove (grace period, then kill; a container already gone or being removed
counts as stopped), why it stopped serving, its log (whole, a tail, or followed), and
its description from labels. Nothing else in the package calls these verbs directly.
"""

from __future__ import annotations

from collections.abc import Iterator
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
            return "the container restarted"
        return None

    def log(self, tail: int | None = None) -> str:
        """Its log (all of it, or the last `tail` lines); empty when it is gone already."""
        try:
            raw = self.container.logs(tail=tail) if tail is not None else self.container.logs()
        except Exception:  # removed under us
            return ""
        return raw.decode(errors="replace")

    def follow(self, tail: int) -> Iterator[str]:
        """The last `tail` lines, then new lines as they come, until the container stops."""
        for chunk in self.container.logs(stream=True, follow=True, tail=tail):
            yield chunk.decode(errors="replace")
