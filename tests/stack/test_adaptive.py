"""In-server adaptive speculation variants of the shipped stack: they render, bad ones exit 2."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from composer.cli import main
from composer.errors import ConfigError
from composer.render.spec import build_spec, resolve
from composer.stack import adaptive
from composer.stack.load import load_stack
from tests.conftest import REPO

STACKS = (REPO / "composer.toml",)
KEY = "sk-adaptive-test-key-0123456789"


def _stack(extra: str | None = None, tmp_path: Path | None = None, flags: tuple[str, ...] = ()):
    files = list(STACKS)
    if extra is not None:
        assert tmp_path is not None
        (tmp_path / "extra.toml").write_text(extra, encoding="utf-8")
        files.append(tmp_path / "extra.toml")
    return load_stack(files, env_file=None, environ={}, flags=flags)


def _speculative_config(stack, name: str) -> dict:
    command = [resolve(part) for part in build_spec(stack, stack.variant(name)).command]
    return json.loads(command[command.index("--speculative-config") + 1])


def test_the_three_variants_render_vllms_field_names() -> None:
    stack = _stack()
    dsd = _speculative_config(stack, "mtp-dsd")
    assert dsd == {
        "method": "mtp",
        "num_speculative_tokens": 7,
        "num_speculative_tokens_per_batch_size": [[1, 2, 7], [3, 8, 3], [9, 512, 0]],
    }
    for name, method in (("mtp-adaptive", "mtp"), ("dflash2-adaptive", "dflash")):
        config = _speculative_config(stack, name)
        assert config["method"] == method and config["enable_adaptive_verification"] is True
        env = dict(build_spec(stack, stack.variant(name)).environment)
        assert env["VLLM_USE_V2_MODEL_RUNNER"] == "1" and env["VLLM_WSL2_ENABLE_PIN_MEMORY"] == "1"
    assert "VLLM_USE_V2_MODEL_RUNNER" not in dict(build_spec(stack, stack.variant("mtp")).environment)
    for name in stack.variants:
        rendered = json.dumps([resolve(p) for p in build_spec(stack, stack.variant(name)).command])
        assert "disable_by_batch_size" not in rendered


def test_the_shipped_stack_has_the_three_variants_and_their_compose_files() -> None:
    stack = _stack()
    assert {"mtp-dsd", "mtp-adaptive", "dflash2-adaptive"} <= set(stack.variants)
    for name in ("mtp-dsd", "mtp-adaptive", "dflash2-adaptive"):
        assert (REPO / "compose" / f"{name}.yml").is_file()
        assert (REPO / "kubernetes" / "overlays" / name / "deployment.yaml").is_file()


def test_num_speculative_tokens_moves_the_static_ks_but_not_a_schedule() -> None:
    stack = load_stack(list(STACKS), env_file=None, environ={"NUM_SPECULATIVE_TOKENS": "3"})
    assert stack.variant("mtp").speculative.num_speculative_tokens == 3
    assert stack.variant("mtp-adaptive").speculative.num_speculative_tokens == 3
    dsd = stack.variant("mtp-dsd").speculative
    assert dsd.num_speculative_tokens == 7 and dsd.per_batch_size[0] == (1, 2, 7)
    rendered = str(build_spec(stack, stack.variant("mtp-dsd")).command)
    assert "NUM_SPECULATIVE_TOKENS" not in rendered  # the schedule's maximum is a literal


@pytest.mark.parametrize(
    ("schedule", "reason"),
    [
        ("[[1, 2, 7], [2, 8, 3], [9, 512, 0]]", "range 2..8 overlaps or is out of order"),
        ("[[1, 2, 7], [4, 512, 3]]", "range 4..512 leaves a gap: expected it to start at 3"),
        ("[[2, 512, 3]]", "expected it to start at 1"),
        ("[[1, 2, 8], [3, 512, 0]]", "K=8 for 1..2 is outside 0..7"),
        ("[[1, 2, 7], [3, 100, 0]]", "the last range ends at 100, below max_num_seqs 256"),
        ("[[1, 512, 0]]", "every K is 0"),
        ("[[1, 2]]", "is not [start_bs, end_bs, K]"),
        ("[[5, 2, 1]]", "range 5..2 is empty"),
        ('"x"', "not JSON"),
    ],
)
def test_bad_schedules_are_refused_naming_the_rule(tmp_path: Path, schedule: str, reason: str) -> None:
    extra = f"[variants.mtp-dsd.speculative]\nper_batch_size = {schedule}\n"
    with pytest.raises(ConfigError) as err:
        _stack(extra, tmp_path)
    message = str(err.value)
    assert message.startswith("invalid variants.mtp-dsd.speculative.per_batch_size")
    assert reason in message and "\n" not in message


def test_max_num_seqs_in_extra_args_sets_the_coverage(tmp_path: Path) -> None:
    extra = '[variants.mtp-dsd]\nextra_args = ["--max-num-seqs", "64"]\n'
    extra += "[variants.mtp-dsd.speculative]\nper_batch_size = [[1, 2, 7], [3, 64, 0]]\n"
    assert _stack(extra, tmp_path).variant("mtp-dsd").speculative.per_batch_size == ((1, 2, 7), (3, 64, 0))
    assert adaptive.max_num_seqs(["--max_num_seqs=32"]) == 32


def test_a_schedule_from_set_is_json() -> None:
    stack = _stack(flags=("variants.mtp-dsd.speculative.per_batch_size=[[1,4,5],[5,256,0]]",))
    assert stack.variant("mtp-dsd").speculative.per_batch_size == ((1, 4, 5), (5, 256, 0))


@pytest.mark.parametrize(
    ("extra", "reason"),
    [
        ('[variants.mtp-adaptive]\nextra_args = ["--enforce-eager"]\n', "refuses it with --enforce-eager"),
        ('[variants.mtp-adaptive.env]\nVLLM_USE_V2_MODEL_RUNNER = "0"\n', "V2 model runner"),
    ],
)
def test_adaptive_verification_requirements_are_checked(tmp_path: Path, extra: str, reason: str) -> None:
    with pytest.raises(ConfigError) as err:
        _stack(extra, tmp_path)
    assert str(err.value).startswith("variants.")
    assert "adaptive_verification = true" in str(err.value) and reason in str(err.value)


@pytest.mark.parametrize("key", ["speculative_disable_by_batch_size", "disable_by_batch_size"])
def test_the_removed_vllm_key_is_refused(tmp_path: Path, key: str) -> None:
    extra = f"[variants.mtp.speculative.extra]\n{key} = 4\n"
    with pytest.raises(ConfigError, match="removed from vLLM"):
        _stack(extra, tmp_path)


def test_the_raw_vllm_keys_in_extra_point_to_the_stack_keys(tmp_path: Path) -> None:
    extra = "[variants.mtp.speculative.extra]\nenable_adaptive_verification = true\n"
    with pytest.raises(ConfigError, match=r"set it as variants\.mtp\.speculative\.adaptive_verification"):
        _stack(extra, tmp_path)


def _cli(tmp_path: Path, *args: str) -> Result:
    env_file = tmp_path / "t.env"
    env_file.write_text(f"VLLM_API_KEY={KEY}\n")
    stacks = [a for path in STACKS for a in ("--stack", str(path))]
    bad = tmp_path / "bad.toml"
    bad.write_text("[variants.mtp-dsd.speculative]\nper_batch_size = [[1, 2, 7], [4, 512, 0]]\n")
    return CliRunner().invoke(main, ["--env-file", str(env_file), *stacks, "--stack", str(bad), *args])


@pytest.mark.parametrize("command", [["up", "mtp-dsd"], ["render", "--out", "OUT"], ["config"]])
def test_a_bad_schedule_exits_2_with_one_line_before_anything_runs(
    tmp_path: Path, command: list[str]
) -> None:
    result = _cli(tmp_path, *[str(tmp_path / "out") if c == "OUT" else c for c in command])
    assert result.exit_code == 2, result.output
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1 and "leaves a gap" in lines[0] and "Traceback" not in result.output
    assert not (tmp_path / "out").exists()


def test_config_lists_the_schedule_and_adaptive_verification(tmp_path: Path) -> None:
    env_file = tmp_path / "t.env"
    env_file.write_text(f"VLLM_API_KEY={KEY}\n")
    stacks = [a for path in STACKS for a in ("--stack", str(path))]
    result = CliRunner().invoke(main, ["--env-file", str(env_file), *stacks, "config"])
    assert result.exit_code == 0, result.output
    rows = {line.split()[0]: line.split()[1] for line in result.output.splitlines() if line.strip()}
    assert rows["variants.mtp-dsd.speculative.per_batch_size"] == "[[1,2,7],[3,8,3],[9,512,0]]"
    assert rows["variants.mtp-adaptive.speculative.adaptive_verification"] == "true"
    assert rows["variants.mtp-adaptive.env.VLLM_USE_V2_MODEL_RUNNER"] == "1"
    # config lists every settable key: a variant without a schedule shows it unset
    assert rows["variants.mtp.speculative.per_batch_size"] == "(not"
    assert rows["variants.mtp.speculative.adaptive_verification"] == "false"


EAGER_BASELINE = '[variants.baseline]\nextra_args = ["--enforce-eager", "--max-num-seqs", "256"]\n'


def test_a_stack_wide_enforce_eager_is_dropped_for_the_adaptive_variants_only(tmp_path: Path) -> None:
    stack = _stack(EAGER_BASELINE, tmp_path)  # loads: the user only touched the baseline
    for name in ("baseline", "mtp", "dflash2", "mtp-dsd"):
        assert "--enforce-eager" in [resolve(part) for part in build_spec(stack, stack.variant(name)).command]
        assert stack.variant(name).dropped_args == ()
    for name in ("mtp-adaptive", "dflash2-adaptive"):
        variant = stack.variant(name)
        command = [resolve(part) for part in build_spec(stack, variant).command]
        assert "--enforce-eager" not in command and command[-2:] == ["--max-num-seqs", "256"]
        assert variant.dropped_args == (("--enforce-eager", "variants.baseline.extra_args"),)
        assert _speculative_config(stack, name)["enable_adaptive_verification"] is True


def test_doctor_says_which_variant_runs_without_the_inherited_flag(tmp_path: Path) -> None:
    from composer.doctor.model_checks import check_dropped_eager
    from composer.doctor.report import variant_facts
    from composer.render.target import resolve_target

    def facts(stack, name):
        return variant_facts(resolve_target(stack, name))

    stack = _stack(EAGER_BASELINE, tmp_path)
    found = check_dropped_eager(facts(stack, "mtp-adaptive"))
    assert found is not None and found.name == "adaptive-eager" and found.status == "warn"
    assert "mtp-adaptive runs without --enforce-eager" in found.detail
    assert "variants.baseline.extra_args" in found.detail and "full CUDA graphs" in found.detail
    assert "variants.mtp-adaptive.extra_args" in found.fix
    assert check_dropped_eager(facts(stack, "mtp")) is None
    assert check_dropped_eager(facts(_stack(), "mtp-adaptive")) is None


def test_the_cpu_stack_loads_with_its_eager_baseline_and_no_per_variant_workaround() -> None:
    cpu = REPO / "images/vllm-cpu/cpu.toml"
    assert "[variants.mtp-adaptive]" not in cpu.read_text(encoding="utf-8")
    stack = load_stack([*STACKS, cpu], env_file=None, environ={})
    assert "--enforce-eager" in stack.variant("ngram").extra_args
    assert "--enforce-eager" not in stack.variant("dflash2-adaptive").extra_args
    assert "--dtype" in stack.variant("dflash2-adaptive").extra_args


def test_render_and_doctor_keep_working_with_an_eager_baseline(tmp_path: Path) -> None:
    eager = tmp_path / "eager.toml"
    eager.write_text(EAGER_BASELINE, encoding="utf-8")
    env_file = tmp_path / "t.env"
    env_file.write_text(f"VLLM_API_KEY={KEY}\n")
    stacks = [a for path in (*STACKS, eager) for a in ("--stack", str(path))]
    out = tmp_path / "out"
    result = CliRunner().invoke(main, ["--env-file", str(env_file), *stacks, "render", "--out", str(out)])
    assert result.exit_code == 0, result.output
    assert "--enforce-eager" in (out / "baseline.yml").read_text()
    assert "--enforce-eager" not in (out / "mtp-adaptive.yml").read_text()


FLASHINFER = '[stack]\nattention_backend = "flashinfer"\n'


def test_a_stack_wide_backend_refuses_the_adaptive_variants_only(tmp_path: Path) -> None:
    stack = _stack(FLASHINFER, tmp_path)  # loads: the user chose a backend for the whole stack
    for name in ("baseline", "mtp", "dflash2", "mtp-dsd"):
        assert stack.startable(name).refused == ""
    for name in ("mtp-adaptive", "dflash2-adaptive"):
        refused = stack.variant(name).refused
        assert refused.startswith(f"variants.{name}.speculative.adaptive_verification = true")
        assert "stack.attention_backend = flashinfer" in refused and "device-decided query lengths" in refused
        with pytest.raises(ConfigError, match="flash_attn, triton_attn or flex_attention"):
            stack.startable(name)
    assert _stack().variant("mtp-adaptive").refused == ""


def test_a_live_set_naming_a_refused_variant_is_refused_at_load(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"^gateway\.live names mtp-adaptive: .*device-decided"):
        _stack(FLASHINFER + '[gateway]\nlive = ["baseline", "mtp-adaptive"]\n', tmp_path)


def _flashinfer_cli(tmp_path: Path, *args: str) -> Result:
    env_file = tmp_path / "t.env"
    env_file.write_text(f"VLLM_API_KEY={KEY}\nATTENTION_BACKEND=flashinfer\n")
    stacks = [a for path in STACKS for a in ("--stack", str(path))]
    return CliRunner().invoke(main, ["--env-file", str(env_file), *stacks, *args])


@pytest.mark.parametrize(
    "command",
    [
        ["up", "mtp-adaptive", "--dry-run"],
        ["up", "baseline", "mtp-adaptive", "--dry-run"],
        ["up", "baseline", "dflash2-adaptive", "--target", "kubernetes"],
        ["up", "mtp-adaptive", "--target", "kubernetes"],
    ],
)
def test_starting_a_refused_variant_exits_2_with_one_line(tmp_path: Path, command: list[str]) -> None:
    result = _flashinfer_cli(tmp_path, *command)
    assert result.exit_code == 2, result.output
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1 and "stack.attention_backend = flashinfer (from" in lines[0], lines
    assert "Traceback" not in result.output


def test_render_says_which_rendered_variants_do_not_start(tmp_path: Path) -> None:
    out = tmp_path / "out"
    result = _flashinfer_cli(tmp_path, "render", "--out", str(out))
    assert result.exit_code == 0, result.output
    assert (out / "mtp-adaptive.yml").is_file() and (out / "baseline.yml").is_file()
    warned = [line for line in result.output.splitlines() if line.startswith("warning:")]
    assert [line.split()[1] for line in warned] == ["mtp-adaptive", "dflash2-adaptive"], warned


def test_doctor_fails_the_refused_variant_and_bench_leaves_it_out(tmp_path: Path) -> None:
    from composer.bench.decide import plan_arms
    from composer.doctor.model_checks import check_refused
    from composer.doctor.report import variant_facts
    from composer.render.target import resolve_target

    stack = _stack(FLASHINFER, tmp_path)
    found = check_refused(variant_facts(resolve_target(stack, "mtp-adaptive")))
    assert found is not None and found.name == "adaptive-backend" and found.status == "fail"
    assert "variants.mtp-adaptive.speculative.adaptive_verification = false" in found.fix
    assert check_refused(variant_facts(resolve_target(stack, "mtp"))) is None
    arms = plan_arms(stack, lambda image: True)
    assert "mtp-adaptive" not in arms.adaptive and "mtp-dsd" in arms.adaptive
    assert any(note.startswith("mtp-adaptive left out: variants.mtp-adaptive") for note in arms.notes)


def test_ls_names_the_variants_that_do_not_start_with_this_stack(tmp_path: Path) -> None:
    from composer.swap.status import format_variants, variants_data

    rows = variants_data(_stack(FLASHINFER, tmp_path), None)
    assert [r["variant"] for r in rows if r["refused"]] == ["mtp-adaptive", "dflash2-adaptive"]
    assert format_variants(rows).splitlines()[-1] == (
        "not startable with this stack: mtp-adaptive, dflash2-adaptive (compose-spec doctor says why)"
    )
    assert "not startable" not in format_variants(variants_data(_stack(), None))
