"""How far a variant's name travels through `up`: the modules of composer/ that it reaches.

Run: python3 benchmarks/variant_walk.py [VARIANT] [--env-file .env.demo] [--swap]

Two counts, printed side by side:
- run time: `compose-spec up VARIANT --dry-run` (with --swap: `up baseline`, then a real
  `up VARIANT`, then `down`, in a project and on a port of their own) runs in this process
  under `sys.setprofile`; a composer function counts when one of its arguments is the name,
  or a value made from it: an object, tuple, list or mapping that holds the name one level
  down (a field, an attribute, an item), such as a resolved target or a plan;
- static: the modules of composer/ with a function that takes a parameter named for the
  variant (`variant`, `variants`, `target`, `name` of a variant) or annotated with a type
  made from it (`Target`, `LiveTarget`, `ServiceSpec`, `RunningVariant`, `Member`, plans).
Fewer modules is better: the name is resolved once at the edge, then objects travel.
Needs Docker and the simulator images (make image-sim) for the run-time count.
"""

from __future__ import annotations

import argparse
import ast
import os
import secrets
import socket
import sys
from collections import Counter
from pathlib import Path
from types import FrameType

REPO = Path(__file__).resolve().parents[1]
PACKAGE = REPO / "composer"
NAME_PARAMETERS = {"variant", "variants", "target", "requested", "variant_name"}
MADE_FROM_IT = ("Target", "LiveTarget", "ServiceSpec", "RunningVariant", "Member", "Plan")


def _holds(value: object, name: str) -> bool:
    """The value is the name, or holds it one level down."""
    if value == name:
        return True
    if isinstance(value, (tuple, list, set, frozenset)):
        return any(item == name for item in value)
    if isinstance(value, dict):
        return any(k == name or v == name for k, v in value.items())
    fields = getattr(value, "__dict__", None)
    if isinstance(fields, dict):
        return any(v == name for v in fields.values() if isinstance(v, str))
    return False


def run_time(argv_sets: list[list[str]], name: str) -> Counter[str]:
    """The composer modules whose functions received the name (or a value holding it)."""
    from composer.cli import main

    reached: Counter[str] = Counter()

    def profile(frame: FrameType, event: str, _arg: object) -> None:
        if event != "call":
            return
        module = frame.f_globals.get("__name__", "")
        if not module.startswith("composer."):
            return
        code = frame.f_code
        for local in code.co_varnames[: code.co_argcount + code.co_kwonlyargcount]:
            try:
                if _holds(frame.f_locals.get(local), name):
                    reached[module] += 1
                    return
            except Exception:  # a value whose comparison raises is not the name
                continue

    for argv in argv_sets:
        sys.setprofile(profile)
        try:
            main(args=argv, prog_name="compose-spec", standalone_mode=False)
        except SystemExit:
            pass
        finally:
            sys.setprofile(None)
    return reached


def static() -> set[str]:
    """The modules of composer/ with a function taking the name or a value made from it."""
    found = set()
    for path in sorted(PACKAGE.rglob("*.py")):
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            args = [*node.args.posonlyargs, *node.args.args, *node.args.kwonlyargs]
            for arg in args:
                note = ast.unparse(arg.annotation) if arg.annotation is not None else ""
                if arg.arg in NAME_PARAMETERS or any(t in note for t in MADE_FROM_IT):
                    found.add(".".join(path.relative_to(REPO).with_suffix("").parts))
                    break
    return found


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("variant", nargs="?", default="mtp")
    parser.add_argument("--env-file", default=str(REPO / ".env.demo"))
    parser.add_argument("--swap", action="store_true", help="a real up baseline, up VARIANT, down")
    args = parser.parse_args()
    os.chdir(REPO)
    project = f"walk{secrets.token_hex(3)}"
    os.environ.update(
        COMPOSE_PROJECT_NAME=project, VLLM_PORT=str(_free_port()), VLLM_API_KEY=secrets.token_hex(16)
    )
    common = ["--env-file", args.env_file]
    if args.swap:
        argv_sets = [[*common, "up", "baseline"], [*common, "up", args.variant], [*common, "down"]]
        run_time(argv_sets[:1], args.variant)  # the setup: baseline serves (not counted)
        reached = run_time(argv_sets[1:2], args.variant)
        run_time(argv_sets[2:], args.variant)
    else:
        reached = run_time([[*common, "up", args.variant, "--dry-run"]], args.variant)
    statically = static()
    print(f"run time ({'up' if args.swap else 'up --dry-run'} {args.variant}): {len(reached)} modules")
    for module, calls in sorted(reached.items()):
        print(f"  {module}: {calls} calls")
    print(f"static: {len(statically)} modules of {sum(1 for _ in PACKAGE.rglob('*.py'))}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
