"""follow_service without Docker: waits for a container, follows it, moves to the next."""

from __future__ import annotations

from types import SimpleNamespace

from composer.swap import logs


class _Container:
    def __init__(self, cid: str, variant: str, chunks: list[str], status: str = "running") -> None:
        self.container = SimpleNamespace(id=cid)
        self.name, self.status, self.variant, self.chunks = f"p-vllm-{variant}", status, variant, chunks
        self.followed: list[tuple[int | None, object]] = []

    def describe(self) -> SimpleNamespace:
        return SimpleNamespace(variant=self.variant)

    def follow(self, lines, since=None, timestamps=False):
        self.followed.append((lines, since))
        yield from self.chunks


def test_follows_each_new_container_and_stops_cleanly(monkeypatch) -> None:
    first = _Container("a", "baseline", ["a1\n", "a2\n"])
    first_gone = _Container("a", "baseline", [], status="exited")
    second = _Container("b", "mtp", ["b1\n"])
    answers = iter([[], [], [first], [first_gone], [second]])
    monkeypatch.setattr(logs, "our_containers", lambda stack, client: next(answers))
    stack = SimpleNamespace(project="p")
    events = logs.follow_service(stack, None, tail=5, poll=0.001)  # type: ignore[arg-type]
    seen = [next(events) for _ in range(5)]
    assert [(e.text, e.switch) for e in seen] == [
        ("waiting for a variant container of project p", True),
        ("a1\n", False),
        ("a2\n", False),
        ("now following mtp (p-vllm-mtp)", True),
        ("b1\n", False),
    ]
    # the first container from its last `tail` lines, the next one from its start
    assert first.followed == [(5, None)] and second.followed == [(None, None)]
    events.close()  # the caller stops iterating (Ctrl-C in `logs -f`): no error, no more turns
