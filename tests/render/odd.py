"""A fixed set of awkward values for renders checked by real tools (compose, shellcheck)."""

from __future__ import annotations

from dataclasses import replace

from composer.stack.model import Stack

QUOTES = "a \"b\" 'c' `d` \\e"
EXPANSIONS = "$HOME ${HOME} $(id) $((1+1)) ~ * ? [ab] !x {a,b} $$ $"
UNICODE = "é 😀 \u2028 \x85 \u00a0 \t\r"


def odd_stack(base: Stack, multiline: bool = True) -> Stack:
    """`base` with every free-text value replaced by something a naive quoting breaks on."""
    newline = "\nline two" if multiline else ""
    variants = dict(base.variants)
    variants["dflash2"] = replace(
        variants["dflash2"],
        env=(
            *variants["dflash2"].env,
            ("ODD_VALUE", f"{QUOTES} {EXPANSIONS}{newline}"),
            ("ON", "off"),
            ("null", ""),
        ),
        extra_args=("--odd", f"{EXPANSIONS}", "", " ", f"-{UNICODE}", f"x{newline}"),
        description=f"odd {QUOTES} {EXPANSIONS}{newline}",
    )
    return replace(
        base,
        service="on",  # YAML 1.1 reads an unquoted on as true
        served_model_name=f"-served {QUOTES} {EXPANSIONS} {UNICODE}{newline}",
        model_dir=f"/tmp/model dir/{QUOTES} $X ${{Y ,x=1 é😀 {{",
        draft_dir='/tmp/draft,with=csv,"quotes"$$',
        model_path=f"/models/m {QUOTES} ,a=b $Z",
        draft_path='/models/d "q" $(id) ${A:-b}',
        images={"vllm": "registry.local:5000/vllm:odd$x", "dflash2": "img-$HOME'q'"},
        variants=variants,
        env=(("STACK_ODD", f"{EXPANSIONS} {QUOTES}"),),
    )
