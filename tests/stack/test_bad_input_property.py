"""Property: whatever stack file, env file and `--set` flags it is given, `config`, `render`
and `doctor` end in success (doctor: a report, exit 0 or 1) or in exactly one line on
stderr with exit 2, and never in a traceback. A refused `render` writes nothing.

Hypothesis starts from the project's valid composer.toml and breaks it: nasty values
(huge numbers, unicode, control characters, nested tables where strings are expected,
empty strings, negative numbers, lists) in known and unknown keys, env files with such
values and with malformed lines or bytes that are not UTF-8, and `--set` flags. doctor
runs for real against this machine's Docker engine.
"""

from __future__ import annotations

import copy
import tempfile
import tomllib
from collections import Counter
from pathlib import Path

import pytest
import tomli_w
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from composer.cli import main
from tests.conftest import REPO
from tests.render.helpers import ENV_VARS_READ

EXAMPLES = 300
BASE = tomllib.loads((REPO / "composer.toml").read_text(encoding="utf-8"))

SPECIAL_TEXT = [
    "",
    " ",
    "9" * 400 + "G",
    "9" * 30,
    "-1",
    "0",
    "1e309",
    "NaN",
    "inf",
    "\x00",
    "a\nb",
    "\r",
    "\t",
    "\x1b[31m",
    "}",
    "${X}",
    "$HOME",
    "'",
    '"',
    "\\",
    "ü",
    "Ключ",
    "🙂",
    "\u202e",
    "\ufeff",
    "/",
    "..",
    "/models/../etc",
    "models",
    "a:b",
    "UPPER CASE:tag with space",
    "-x",
    "--flag",
    "0.0.0.0",
    "::",
    "::1",
    "fe80::1%eth0",
    "300.1.1.1",
    "192.0.2.1",
    "all",
    "none",
    "0,1,2,3",
    "7.0GiB",
    "4.5G",
    "1T",
    "mtp",
    "baseline",
    "dflash",
    "dflash2",
    "flash_attn",
    "1h",
    "15m",
    "99999999999h",
    "vllm-sim:latest",
    "x" * 5000,
]
TEXT = st.one_of(
    st.sampled_from(SPECIAL_TEXT),
    st.text(alphabet=st.characters(exclude_categories=("Cs",)), max_size=30),
)
SCALAR = st.one_of(
    TEXT,
    st.integers(min_value=-(2**63), max_value=2**63 - 1),
    st.sampled_from([0, -1, 1, 7, 128, 129, 65535, 65536, 2**31, 2**63 - 1, -(2**63)]),
    st.floats(allow_nan=True, allow_infinity=True),
    st.booleans(),
)
KEY = st.one_of(st.sampled_from(["a", "mtp", "", " ", "ü", "X_1", "1BAD", "--x"]), st.text(max_size=8))
VALUE = st.recursive(
    SCALAR,
    lambda inner: st.one_of(st.lists(inner, max_size=3), st.dictionaries(KEY, inner, max_size=3)),
    max_leaves=6,
)

STACK_KEYS = [
    "project",
    "service",
    "served_model_name",
    "port",
    "bind_address",
    "tensor_parallel_size",
    "max_model_len",
    "gpus",
    "attention_backend",
    "model_dir",
    "model_path",
    "draft_dir",
    "draft_path",
    "start_period",
    "stop_grace_period",
    "env",
    "api_key",
    "unknown",
]
VARIANT_KEYS = [
    "description",
    "image",
    "kv_cache_memory",
    "min_kv_cache_tokens",
    "extends",
    "extra_args",
    "env",
    "speculative",
    "unknown",
]
SPECULATIVE_KEYS = [
    "method",
    "num_speculative_tokens",
    "draft_model",
    "attention_backend",
    "extra",
    "unknown",
]
VARIANTS = ["baseline", "mtp", "dflash2", "new"]
PATHS = (
    [("stack", k) for k in STACK_KEYS]
    + [("stack", "env", k) for k in ("SIM_X", "1BAD", "VLLM_API_KEY")]
    + [("images", k) for k in ("vllm", "dflash2", "new", "Bad Key", "new_one")]
    + [("variants", v, k) for v in VARIANTS for k in VARIANT_KEYS]
    + [("variants", v, "speculative", k) for v in VARIANTS for k in SPECULATIVE_KEYS]
    + [("variants", v) for v in VARIANTS]
    + [("workloads", k) for k in ("chat", "new", "")]
    + [(top,) for top in ("stack", "images", "variants", "workloads", "nope")]
)
ENV_NAMES = [*ENV_VARS_READ, "VLLM_IMAGE", "DFLASH2_IMAGE", "OTHER"]
FLAG_KEYS = [".".join(p) for p in PATHS] + ["port", "stack.nope", "", "variants..x"]


def _set(data: dict, path: tuple[str, ...], value: object) -> None:
    node = data
    for part in path[:-1]:
        if not isinstance(node.get(part), dict):
            node[part] = {}
        node = node[part]
    node[path[-1]] = value


def _delete(data: dict, path: tuple[str, ...]) -> None:
    node = data
    for part in path[:-1]:
        node = node.get(part)
        if not isinstance(node, dict):
            return
    node.pop(path[-1], None)


@st.composite
def stack_text(draw) -> bytes:
    """composer.toml with 0-3 keys set to nasty values or deleted; sometimes not TOML at all."""
    if draw(st.integers(0, 19)) == 0:
        return draw(st.binary(max_size=60))
    data = copy.deepcopy(BASE)
    for _ in range(draw(st.integers(0, 3))):
        path = draw(st.sampled_from(PATHS))
        if draw(st.integers(0, 5)) == 0:
            _delete(data, path)
        else:
            _set(data, path, draw(VALUE))
    return tomli_w.dumps(data).encode()


def _env_value(text: str) -> str:
    return text.replace("\n", "\\n")


@st.composite
def env_line(draw) -> bytes:
    kind = draw(st.integers(0, 9))
    if kind == 0:
        return draw(st.binary(max_size=30))
    if kind == 1:
        return draw(
            st.sampled_from(['A="unterminated', "=value", "NO_EQUALS", "  ", "# c", "export X=1"])
        ).encode()
    name = draw(st.sampled_from(ENV_NAMES))
    value = _env_value(draw(TEXT))
    quote = draw(st.sampled_from(["", "'", '"']))
    return f"{name}={quote}{value}{quote}".encode()


@st.composite
def env_text(draw) -> bytes:
    lines = [b"VLLM_API_KEY=sk-property-test-key-0123456789abcdef"] if draw(st.booleans()) else []
    lines += draw(st.lists(env_line(), max_size=4))
    return b"\n".join(lines) + b"\n"


@st.composite
def flags(draw) -> list[str]:
    out: list[str] = []
    for _ in range(draw(st.integers(0, 2))):
        value = draw(TEXT)
        out += ["--set", f"{draw(st.sampled_from(FLAG_KEYS))}={value}"]
    return out


OUTCOMES: Counter[str] = Counter()


def _check(command: str, result, out: Path | None = None) -> None:
    """Success, a doctor report, or exactly one error line with exit 2; never a traceback."""
    assert result.exception is None or isinstance(result.exception, SystemExit), (
        f"{command}: {type(result.exception).__name__}: {result.exception}"
    )
    assert "Traceback" not in result.output, result.output
    if result.exit_code == 2:
        lines = result.stderr.splitlines()
        assert len(lines) == 1 and lines[0].startswith("compose-spec: error: "), (command, result.stderr)
        if out is not None:
            assert not out.exists(), "a refused render wrote files"
        OUTCOMES[f"{command}: refused"] += 1
        return
    if command == "doctor":
        assert result.exit_code in (0, 1), (result.exit_code, result.stderr)
        assert result.stdout.rstrip().splitlines()[-1].endswith("fail"), result.stdout
        if result.exit_code == 1:  # the report, then one line naming the failed checks
            errors = [line for line in result.stderr.splitlines() if line.startswith("compose-spec: error")]
            assert len(errors) == 1 and "check(s) failed" in errors[0], result.stderr
        else:
            assert "compose-spec: error" not in result.stderr, result.stderr
    else:
        assert result.exit_code == 0, (command, result.exit_code, result.stderr)
    OUTCOMES[f"{command}: ok"] += 1


def test_any_stack_env_and_flags_end_in_success_or_one_line_exit_2() -> None:
    runner = CliRunner()

    @settings(
        max_examples=EXAMPLES,
        deadline=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
        database=None,
    )
    @given(stack=stack_text(), env=env_text(), sets=flags(), named_in_env=st.booleans())
    def feed(stack: bytes, env: bytes, sets: list[str], named_in_env: bool) -> None:
        OUTCOMES["inputs"] += 1
        with tempfile.TemporaryDirectory(prefix="prop-") as folder:
            root = Path(folder)
            (root / "composer.toml").write_bytes(stack)
            common = ["--env-file", str(root / "gen.env"), *sets]
            if named_in_env:  # the stack file named by COMPOSER_STACK (a later env line may override it)
                env = f"COMPOSER_STACK={root / 'composer.toml'}\n".encode() + env
            else:
                common += ["--stack", str(root / "composer.toml")]
            (root / "gen.env").write_bytes(env)
            out = root / "out"
            for command, args in (
                ("config", ["config"]),
                ("render", ["render", "--out", str(out)]),
                ("doctor", ["doctor"]),
            ):
                _check(
                    command,
                    runner.invoke(main, [*common, *args], env={}),
                    out if command == "render" else None,
                )

    feed()
    print(dict(OUTCOMES))
    assert OUTCOMES["inputs"] >= EXAMPLES
    for command in ("config", "render", "doctor"):
        assert OUTCOMES[f"{command}: ok"] >= EXAMPLES // 20, (
            f"too few valid inputs reach {command}: {OUTCOMES}"
        )
        assert OUTCOMES[f"{command}: refused"] >= EXAMPLES // 10, f"too few bad inputs: {OUTCOMES}"


pytestmark = pytest.mark.docker
