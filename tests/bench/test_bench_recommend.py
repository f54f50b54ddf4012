"""`recommend`: winners per workload class from a benchmark's JSON, and the [workloads] edit."""

from __future__ import annotations

import json
import shutil
import subprocess
import tomllib
from pathlib import Path

import pytest

from composer.bench.recommend import (
    class_names,
    format_wins,
    updated_stack_text,
    winners,
    workloads_block,
    write_workloads,
)
from composer.errors import ConfigError, UsageError
from composer.stack.load import load_stack
from tests.conftest import COMPOSE_SPEC, REPO

# Aggregate tok/s shaped like the simulator's batching model: speculation wins short prompts
# at one stream, loses at 16 streams and on long prompts (prefill dominates, drafting costs).
RATES = {
    # (prompt tokens, streams): {(variant, K): aggregate tok/s}
    (128, 1): {("baseline", 0): 29.0, ("mtp", 3): 47.0, ("mtp", 7): 58.0, ("dflash2", 7): 55.0},
    (128, 16): {("baseline", 0): 450.0, ("mtp", 3): 400.0, ("mtp", 7): 330.0, ("dflash2", 7): 290.0},
    (16000, 1): {("baseline", 0): 20.0, ("mtp", 3): 19.5, ("mtp", 7): 18.5, ("dflash2", 7): 18.0},
    (16000, 16): {("baseline", 0): 120.0, ("mtp", 3): 90.0, ("mtp", 7): 80.0, ("dflash2", 7): 70.0},
}


def synthetic_bench() -> dict:
    points = []
    for (tokens, streams), rates in RATES.items():
        for (variant, k), rate in rates.items():
            points.append(
                {
                    "variant": variant,
                    "k": k,
                    "prompt_tokens": tokens,
                    "concurrency": streams,
                    "aggregate_tok_s": rate,
                    "decode_tok_s": rate / streams,
                    "error": None,
                }
            )
    points.append({"variant": "dflash2", "k": 10, "prompt_tokens": 128, "concurrency": 1, "error": "boom"})
    return {"points": points}


def test_winners_per_class_with_margins() -> None:
    wins = {w.workload: w for w in winners(synthetic_bench())}
    assert set(wins) == {"chat-1", "chat-16", "long-1", "long-16"}
    chat1 = wins["chat-1"]
    assert (chat1.variant, chat1.k) == ("mtp", 7)
    assert chat1.runner_up == "dflash2 K=7" and chat1.margin == pytest.approx(58.0 / 55.0)
    assert chat1.over_baseline == pytest.approx(58.0 / 29.0)
    for name in ("chat-16", "long-1", "long-16"):
        assert (wins[name].variant, wins[name].k) == ("baseline", 0), name
        assert wins[name].over_baseline == pytest.approx(1.0)
    assert wins["chat-16"].runner_up == "mtp K=3" and wins["chat-16"].margin == pytest.approx(450 / 400)
    assert "(close)" in format_wins(list(wins.values())).splitlines()[3]  # long-1: 20 against 19.5
    assert "(close)" not in format_wins([chat1])


def test_class_names_spell_out_lengths_sharing_a_bucket() -> None:
    names = class_names([(None, 1), (2000, 4), (8000, 16), (16000, 16)])
    assert names == {
        (None, 1): "chat-1",
        (2000, 4): "medium-4",
        (8000, 16): "long8000-16",
        (16000, 16): "long16000-16",
    }


def test_an_old_single_stream_report_counts_as_chat_1() -> None:
    data = {
        "points": [
            {"variant": "baseline", "k": 0, "decode_tok_s": 29.4},
            {"variant": "mtp", "k": 7, "decode_tok_s": 59.0},
        ]
    }
    (win,) = winners(data)
    assert (win.workload, win.variant, win.k) == ("chat-1", "mtp", 7)


def test_nothing_measured_is_a_usage_error() -> None:
    with pytest.raises(UsageError, match="no measured point"):
        winners({"points": [{"variant": "mtp", "k": 7, "error": "boom"}]})


STACK = """\
# my stack
[stack]
project = "demo"   # keep me

[variants.baseline]
description = "plain"

[workloads]
# hand-written
chat-1 = "baseline"   # old choice
medium-4 = "baseline"

[images]
vllm = "vllm/vllm-openai:v0.32.0"  # pinned
"""


def test_edit_keeps_comments_and_other_keys() -> None:
    wins = winners(synthetic_bench())
    text = updated_stack_text(STACK, wins)
    assert "# my stack" in text and 'project = "demo"   # keep me' in text and "# hand-written" in text
    assert 'vllm = "vllm/vllm-openai:v0.32.0"  # pinned' in text
    assert 'chat-1 = "mtp"  # K=7, 58.0 tok/s, 1.05x dflash2 K=7' in text
    assert "old choice" not in text
    parsed = tomllib.loads(text)
    assert parsed["workloads"] == {
        "chat-1": "mtp",
        "medium-4": "baseline",
        "chat-16": "baseline",
        "long-1": "baseline",
        "long-16": "baseline",
    }
    assert parsed["images"] == tomllib.loads(STACK)["images"]
    # The new keys land inside [workloads], before the next table.
    assert text.index('long-16 = "baseline"') < text.index("[images]")


def test_edit_adds_a_table_when_there_is_none_and_refuses_other_forms() -> None:
    wins = winners(synthetic_bench())
    text = updated_stack_text('[stack]\nproject = "demo"', wins)
    assert tomllib.loads(text)["workloads"]["chat-1"] == "mtp"
    assert text.startswith('[stack]\nproject = "demo"\n')
    with pytest.raises(ConfigError, match="without a \\[workloads\\] table"):
        updated_stack_text('workloads = { chat = "mtp" }\n', wins)
    with pytest.raises(ConfigError, match="not valid TOML"):
        updated_stack_text("[stack\n", wins)


def test_block_and_atomic_write(tmp_path: Path) -> None:
    wins = winners(synthetic_bench())
    block = workloads_block(wins)
    assert block.startswith("[workloads]\n") and tomllib.loads(block)["workloads"]["long-16"] == "baseline"
    path = tmp_path / "composer.toml"
    path.write_text(STACK)
    path.chmod(0o640)
    write_workloads(path, wins)
    assert tomllib.loads(path.read_text())["workloads"]["chat-1"] == "mtp"
    assert path.stat().st_mode & 0o777 == 0o640
    assert [p.name for p in tmp_path.iterdir()] == ["composer.toml"]  # no temporary file left


def test_cli_recommend_writes_a_block_the_stack_loads(tmp_path: Path) -> None:
    stack_file = tmp_path / "composer.toml"
    shutil.copy(REPO / "composer.toml", stack_file)
    bench = tmp_path / "bench.json"
    bench.write_text(json.dumps(synthetic_bench()))
    argv = [*COMPOSE_SPEC, "--env-file", str(REPO / ".env.demo"), "--stack", str(stack_file), "recommend"]
    shown = subprocess.run([*argv, "--from", str(bench)], capture_output=True, text=True, cwd=tmp_path)
    assert shown.returncode == 0, shown.stderr
    assert "chat-1    128     1        mtp K=7" in shown.stdout
    assert 'long-16 = "baseline"' in shown.stdout
    assert stack_file.read_text() == (REPO / "composer.toml").read_text()  # nothing written without --write

    done = subprocess.run(
        [*argv, "--from", str(bench), "--write", "--json"], capture_output=True, text=True, cwd=tmp_path
    )
    assert done.returncode == 0, done.stderr
    data = json.loads(done.stdout)
    assert data["written"] == str(stack_file)
    assert {w["workload"]: w["variant"] for w in data["workloads"]}["chat-1"] == "mtp"
    stack = load_stack([stack_file], REPO / ".env.demo")
    assert stack.workloads["chat-1"] == "mtp" and stack.workloads["long-16"] == "baseline"
    original_comments = [
        line for line in (REPO / "composer.toml").read_text().splitlines() if line.lstrip().startswith("#")
    ]
    assert all(line in stack_file.read_text().splitlines() for line in original_comments)


def test_cli_recommend_bad_inputs(tmp_path: Path) -> None:
    argv = [
        *COMPOSE_SPEC,
        "--env-file",
        str(REPO / ".env.demo"),
        "--stack",
        str(REPO / "composer.toml"),
        "recommend",
    ]
    missing = subprocess.run([*argv, "--from", str(tmp_path / "none.json")], capture_output=True, text=True)
    assert missing.returncode == 2 and "cannot read the benchmark results" in missing.stderr
    assert "Traceback" not in missing.stderr
    stranger = tmp_path / "bench.json"
    stranger.write_text(json.dumps({"points": [{"variant": "eagle", "k": 3, "aggregate_tok_s": 9.0}]}))
    unknown = subprocess.run([*argv, "--from", str(stranger)], capture_output=True, text=True)
    assert unknown.returncode == 2 and "eagle" in unknown.stderr and "known: baseline" in unknown.stderr


def test_recommend_reads_the_folder_bench_out_wrote(tmp_path: Path) -> None:
    out = tmp_path / "results"
    out.mkdir()
    argv = [*COMPOSE_SPEC, "--env-file", str(REPO / ".env.demo"), "--stack", str(REPO / "composer.toml")]
    empty = subprocess.run(
        [*argv, "recommend", "--from", str(out)], capture_output=True, text=True, cwd=tmp_path
    )
    assert empty.returncode == 2 and "no bench.json in" in empty.stderr and "bench --out" in empty.stderr
    (out / "bench.json").write_text(json.dumps(synthetic_bench()))
    shown = subprocess.run(
        [*argv, "recommend", "--from", str(out)], capture_output=True, text=True, cwd=tmp_path
    )
    assert shown.returncode == 0, shown.stderr
    assert 'long-16 = "baseline"' in shown.stdout
