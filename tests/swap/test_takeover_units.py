"""Another stack's containers in the same project: recorded in labels, refused at plan time
unless --takeover (pure: the plan decides from the snapshot, `--dry-run` prints it)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from composer import labels as label_names
from composer.render.live import resolve_live
from composer.render.spec import Owner, build_spec
from composer.stack.keys import key_fingerprint
from composer.stack.load import load_stack
from composer.stack.source import StackSource
from composer.swap.plan import plan_live
from composer.swap.snapshot import LiveRunning
from tests.conftest import REPO
from tests.swap.test_plan_units import _decide, _info, _snap
from tests.swap.test_standby_units import _stack

KEY = "sk-" + "a1" * 24
OURS = Owner("/home/me/mine/composer.toml", "m", key_fingerprint(KEY))
THEIRS = Owner("/home/you/demo/composer.toml", "m", key_fingerprint(KEY))


def _owned(owner: Owner | None, variant: str = "mtp"):
    return replace(_info(variant, service="vllm", sleep_mode=False), owner=owner)


def _plan(owner_of_running: Owner | None, target: str = "baseline", takeover: bool = False):
    stack = _stack()
    snap = _snap(stack, [_owned(owner_of_running)], route="http://vllm:8000")
    sleeps = {n: v.standby == "sleep" for n, v in stack.variants.items()}
    from composer.swap.plan import decide

    return decide(
        snap,
        target,
        "h",
        target_sleeps=False,
        sleeps_in_stack=sleeps,
        current_ready=True,
        owner=OURS,
        takeover=takeover,
    )


def test_up_refuses_to_replace_a_variant_another_stack_started() -> None:
    plan = _plan(THEIRS)
    assert plan.steps == () and plan.refused
    assert (
        "mtp (p-vllm-1) was started by another stack, /home/you/demo/composer.toml (project p)"
        in plan.refused
    )
    assert "--takeover" in plan.refused and "-p NAME" in plan.refused
    assert plan.describe() == f"refused: {plan.refused}"  # what --dry-run prints
    assert plan.as_data()["refused"] == plan.refused


def test_joining_what_another_stack_runs_is_refused_too() -> None:
    plan = _plan(THEIRS, target="mtp")  # the same variant and configuration: no step, still refused
    assert plan.refused and plan.steps == ()


@pytest.mark.parametrize(
    ("theirs", "said"),
    [
        (replace(OURS, served_name="other"), "with the served name 'other'"),
        (replace(OURS, key_fingerprint=key_fingerprint("sk-" + "b2" * 24)), "with another API key"),
    ],
)
def test_the_same_stack_file_with_another_name_or_key_is_refused(theirs: Owner, said: str) -> None:
    plan = _plan(theirs)
    assert "was started by this stack file" in plan.refused and said in plan.refused


def test_takeover_replaces_it_with_a_note_and_restarts_even_the_same_configuration() -> None:
    plan = _plan(THEIRS, takeover=True)
    assert not plan.refused and plan.steps == ("stop", "release", "start", "gate")
    assert any(n.startswith("takes over: mtp (p-vllm-1)") for n in plan.notes)
    same = _plan(THEIRS, target="mtp", takeover=True)
    assert same.steps == ("stop", "release", "start", "gate")  # its key and labels become ours


def test_our_own_and_unlabelled_containers_are_never_refused() -> None:
    assert not _plan(OURS).refused
    assert not _plan(None).refused  # an older container, or one started by hand


def test_a_stack_loaded_without_its_command_line_records_and_checks_nothing() -> None:
    stack = _stack()
    assert Owner.of(stack) is None
    assert not _decide(_snap(stack, [_owned(THEIRS)]), "baseline", stack=stack).refused


def test_the_labels_record_the_stack_file_and_a_key_fingerprint_never_the_key(tmp_path: Path) -> None:
    env = tmp_path / "k.env"
    env.write_text(f"VLLM_API_KEY={KEY}\n")
    stack = StackSource((str(REPO / "composer.toml"),), str(env)).load()
    labels = dict(build_spec(stack, stack.variants["mtp"]).labels)
    assert labels[label_names.STACK_FILE] == str((REPO / "composer.toml").resolve())
    assert labels[label_names.KEY_FINGERPRINT] == key_fingerprint(KEY) and len(key_fingerprint(KEY)) == 12
    assert KEY not in repr(labels) and KEY[3:15] not in repr(labels)
    assert Owner.from_labels(labels) == Owner.of(stack)
    alone = load_stack([REPO / "composer.toml"], env, environ={})  # the committed files' render
    assert label_names.STACK_FILE not in dict(build_spec(alone, alone.variants["mtp"]).labels)


def test_a_live_set_refuses_to_join_another_stacks_members() -> None:
    stack = _stack()
    target = resolve_live(stack, ["baseline"])
    service = target.services[0]
    running = [
        LiveRunning(
            service.name,
            "baseline",
            service.spec.container_name,
            "-",
            service.spec.hash,
            "running",
            "s",
            THEIRS,
        )
    ]
    plan = plan_live(target, running, owner=OURS)
    assert plan.refused.startswith("baseline/1 (") and plan.no_op
    assert plan.describe().startswith("refused: ")
    taken = plan_live(target, running, owner=OURS, takeover=True)
    assert taken.replace == ("baseline/1",) and taken.keep == () and "takes over" in taken.describe()


def test_up_set_passes_takeover_to_its_swapper(monkeypatch: pytest.MonkeyPatch) -> None:
    from composer.swap import entry, snapshot
    from composer.swap.outcome import UpOptions

    seen = {}

    def up(self, plan, checked, snap, *more):
        seen.update(takeover=self.options.takeover, poll=self.options.poll_interval, say=self.say)
        seen.update(dry_run=self.options.dry_run)
        return entry.UpResult(variant="baseline+mtp", outcome="planned")

    monkeypatch.setattr(snapshot, "take", lambda stack, client, **kw: snapshot.Snapshot(stack.project, ()))
    monkeypatch.setattr(entry, "run_live", up)
    say = print
    options = UpOptions(takeover=True, dry_run=True)
    entry.up_set(_stack(), ["baseline", "mtp"], client=None, progress=say, options=options)  # type: ignore[arg-type]
    assert seen == {"takeover": True, "poll": 0.1, "say": say, "dry_run": True}
