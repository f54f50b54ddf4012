"""A restarted container's last exit code and its first run's log come from its `die` events
(Docker resets State.ExitCode once a restart runs it again), without Docker."""

from __future__ import annotations

from typing import Any, cast

from composer.engine.variant_container import VariantContainer

DEATHS = [
    {"timeNano": str(1_700_000_000 * 10**9), "Actor": {"Attributes": {"exitCode": "3"}}},
    {"timeNano": str(1_700_000_009 * 10**9), "Actor": {"Attributes": {"exitCode": "4"}}},
]


class _Events:
    def __init__(self, events: list[dict] | None) -> None:
        self.listed = events

    def events(self, **_: object) -> list[dict]:
        if self.listed is None:
            raise ConnectionError("the daemon went away")
        return self.listed


class _Container:
    id, name = "c0ffee", "p-vllm-1"

    def __init__(self, restarts: int, events: list[dict] | None) -> None:
        state = {"Status": "running", "Restarting": False, "ExitCode": 0}
        self.attrs = {"Created": "2023-11-14T22:13:00.5Z", "RestartCount": restarts, "State": state}
        self.client, self.asked = _Events(events), []

    def reload(self) -> None:
        pass

    def logs(self, **kwargs: object) -> bytes:
        self.asked.append(kwargs)
        return b"boot 1\nboot 2\nboom\n"


def _wrap(container: _Container) -> VariantContainer:
    return VariantContainer(cast(Any, container))


def test_the_exit_code_of_a_restarted_container_is_its_last_die_events() -> None:
    assert _wrap(_Container(2, DEATHS)).exit_reason() == "the container exited with code 4 and was restarted"
    unlisted = _wrap(_Container(2, None)).exit_reason()
    assert unlisted == "the container exited with code 0 and was restarted"  # the state's, as a fallback
    assert _wrap(_Container(0, DEATHS)).exit_reason() is None


def test_the_first_run_log_ends_just_after_the_first_death() -> None:
    restarted = _Container(2, DEATHS)
    assert _wrap(restarted).first_run_log(tail=2) == "boot 2\nboom\n"
    assert restarted.asked == [{"tail": "all", "until": 1_700_000_000 + 0.05}]


def test_the_first_run_log_is_the_whole_log_without_a_restart_or_its_events() -> None:
    for container in (_Container(0, DEATHS), _Container(2, None), _Container(2, [])):
        assert _wrap(container).first_run_log(tail=1) == "boot 1\nboot 2\nboom\n"
        assert container.asked == [{"tail": 1, "timestamps": False}]
