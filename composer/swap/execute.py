"""The executor of a plan of typed operations (`composer.swap.ops`): a loop over a dispatch table.

`execute` runs each operation with the handler its type maps to (`Cases`: its `how`'s). When one
fails, or the first Ctrl-C, SIGTERM or SIGHUP arrives, it runs the inverses of the operations
that ran (the failed one included: an inverse is safe on a half-done operation), newest first,
with every stop signal ignored, then raises SwapFailed from the cause (from KeyboardInterrupt:
the CLI exits 130). Without rollback nothing is undone: what ran stays as it is.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from composer.errors import ComposerError, DiagnosedError, SwapFailed
from composer.signals import handled, interrupt_once, interrupts_ignored
from composer.swap.ops import Op

Handlers = Mapping[type[Op], Callable[[Any], object]]


class Cases(dict[str, Callable[[Any], object]]):
    """The handler of a type with several cases: one function per `how` (a case it lacks: KeyError)."""

    def __call__(self, op: Op) -> object:
        return self[op.how](op)


Undone = list[tuple[Op, str]]
"""The inverses that failed, each with why (one line)."""
Explain = Callable[[BaseException, list[Op], "Undone | None"], SwapFailed]
"""How a failure is told: the cause, what ran, and the undo's failures (None: no rollback)."""


Say = Callable[[str], None]


def quiet(_: str) -> None:
    """A `Say` that says nothing."""
    return None


def reason(err: BaseException) -> str:
    if isinstance(err, KeyboardInterrupt):
        return "interrupted"
    return str(err).splitlines()[0] if isinstance(err, ComposerError) else f"{type(err).__name__}: {err}"


def undo(ran: Sequence[Op], handlers: Handlers, say: Say = quiet) -> Undone:
    """Run the inverses of `ran`, newest first; each failure is noted and the rest still run."""
    failed: Undone = []
    for op in reversed(ran):
        for inverse in op.inverse():
            say(f"undo: {inverse.describe()}")
            try:
                handlers[type(inverse)](inverse)
            except Exception as err:  # report it after the cause; undo the rest anyway
                failed.append((inverse, reason(err)))
    return failed


def execute(
    ops: Sequence[Op],
    handlers: Handlers,
    *,
    rollback: bool = True,
    say: Say = quiet,
    failed: Callable[[Op, BaseException], object] | None = None,
    stage: Say = quiet,
    explain: Explain | None = None,
) -> list[Op]:
    """Run `ops` in order and return them, undoing what ran on a failure (see above). `failed` sees
    the failed operation first; `stage` hears each stage, then `undoing`; `explain` words the error."""
    ran: list[Op] = []
    with handled(interrupt_once):
        try:
            for op in ops:
                ran.append(op)
                stage(op.stage())
                handlers[type(op)](op)
        except BaseException as err:
            with interrupts_ignored():
                if failed is not None and ran:
                    failed(ran[-1], err)
                if rollback:
                    stage("undoing")
                undone = undo(ran, handlers, say) if rollback else None
                raise (explain or explain_failure)(err, ran, undone) from err
    return ran


def explain_failure(err: BaseException, ran: list[Op], undone: Undone | None) -> SwapFailed:
    """The error of a failed run: what failed and why, then what the undo did."""
    diagnosed = err if isinstance(err, DiagnosedError) else None
    message = f"{ran[-1].describe()} failed: {reason(err)}" if ran else reason(err)
    tail, hints = (diagnosed.log_tail, diagnosed.hints) if diagnosed else ("", ())
    if undone is None:
        return SwapFailed(
            f"{message}; rollback disabled (--no-rollback): what ran is left as it is", tail, hints
        )
    if undone:
        left = "; ".join(f"{op.describe()}: {why}" for op, why in undone)
        return SwapFailed(f"{message}; the undo failed too: {left}", tail, hints, rolled_back=False)
    return SwapFailed(f"{message}; undone: what served before serves again", tail, hints, rolled_back=True)
