"""Value parsers: what each accepts and the allowed values each names on refusal."""

from __future__ import annotations

import pytest

from composer.stack import values as v


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("4.5GiB", 4831838208),
        ("4831838208", 4831838208),
        (4831838208, 4831838208),
        ("4.5G", 4831838208),
        ("4.5Gi", 4831838208),
        ("4.5GB", 4_500_000_000),
        ("4.5g", 4_500_000_000),
        ("7.0GiB", 7516192768),
        (" 512 MiB ", 512 << 20),
        ("1024B", 1024),
        ("2T", 2 << 40),
    ],
)
def test_size_accepts_human_and_byte_forms(raw: object, expected: int) -> None:
    assert v.parse_size(raw) == expected


@pytest.mark.parametrize("raw", ["", "0", 0, -1, "0.1B", "4.5 gib", "4.5XB", "lots", True, "1e9", "٣G"])
def test_size_refuses_the_rest(raw: object) -> None:
    with pytest.raises(ValueError, match=r"4\.5GiB"):
        v.parse_size(raw)


@pytest.mark.parametrize(("raw", "expected"), [("7", 7), (7, 7), (" 12 ", 12), ("+3", None)])
def test_positive_int(raw: object, expected: int | None) -> None:
    if expected is None:
        with pytest.raises(ValueError, match="positive integer"):
            v.parse_positive_int(raw)
    else:
        assert v.parse_positive_int(raw) == expected


@pytest.mark.parametrize("raw", ["0", 0, -3, "1_000", "٣", "7.0", 7.0, True, "seven", ""])
def test_positive_int_refuses(raw: object) -> None:
    with pytest.raises(ValueError, match="a positive integer"):
        v.parse_positive_int(raw)


@pytest.mark.parametrize(
    ("raw", "ok"), [(1, True), ("65535", True), (0, False), (65536, False), ("http", False)]
)
def test_port_range(raw: object, ok: bool) -> None:
    if ok:
        assert v.parse_port(raw) == int(raw)
    else:
        with pytest.raises(ValueError, match="1 to 65535"):
            v.parse_port(raw)


@pytest.mark.parametrize("method", v.SPECULATIVE_METHODS)
def test_every_vllm_method_is_accepted(method: str) -> None:
    assert v.parse_method(method) == method


@pytest.mark.parametrize("raw", ["MTP", "medusa", "", "dflash2"])
def test_unknown_method_lists_the_allowed_ones(raw: str) -> None:
    with pytest.raises(ValueError) as err:
        v.parse_method(raw)
    assert "ngram" in str(err.value) and "dflash" in str(err.value) and "mtp" in str(err.value)


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("0,1,2,3", ("0", "1", "2", "3")),
        (" 0, 2 ", ("0", "2")),
        ([0, 1], ("0", "1")),
        ("all", ("all",)),
        ("none", None),
        ("NONE", None),
        ("GPU-5a3f-99", ("GPU-5a3f-99",)),
    ],
)
def test_gpu_lists(raw: object, expected: tuple[str, ...] | None) -> None:
    assert v.parse_gpus(raw) == expected


@pytest.mark.parametrize("raw", ["", "0;1", "zero", "٣", "0,all", "device=0"])
def test_gpu_lists_refused(raw: str) -> None:
    with pytest.raises(ValueError, match="GPU list"):
        v.parse_gpus(raw)


def test_attention_backend_is_case_insensitive_but_ascii() -> None:
    assert v.parse_attention_backend("flash_attn") == "flash_attn"
    assert v.parse_attention_backend("FLEX_ATTENTION") == "FLEX_ATTENTION"
    for bad in ("fa3", "\ufb02ash_attn"):  # the ligature upper-cases to FLASH_ATTN
        with pytest.raises(ValueError, match="flash_attn"):
            v.parse_attention_backend(bad)


def test_text_refuses_empty_nul_and_undecodable() -> None:
    assert v.parse_text("a b $(c)") == "a b $(c)"
    for bad in ("", "a\x00b", "caf\udce9", True, None, ["x"]):
        with pytest.raises(ValueError):
            v.parse_text(bad)


@pytest.mark.parametrize(
    ("raw", "expected"), [("127.0.0.1", "127.0.0.1"), ("::1", "::1"), (" 0.0.0.0", "0.0.0.0")]
)
def test_ip(raw: str, expected: str) -> None:
    assert v.parse_ip(raw) == expected


@pytest.mark.parametrize("raw", ["localhost", "127.0.0.1:80", "", "1.2.3.4 5"])
def test_ip_refused(raw: str) -> None:
    with pytest.raises(ValueError, match="IP address"):
        v.parse_ip(raw)


@pytest.mark.parametrize(("raw", "expected"), [("15m", 900), (90, 90), ("90s", 90), ("1h", 3600)])
def test_duration(raw: object, expected: int) -> None:
    assert v.parse_duration(raw) == expected


def test_names_and_bools() -> None:
    assert v.parse_name("vllm_2-a") == "vllm_2-a"
    for bad in ("Vllm", "-x", "a b", ""):
        with pytest.raises(ValueError, match="lowercase"):
            v.parse_name(bad)
    assert v.parse_bool("yes") is True and v.parse_bool("0") is False
    with pytest.raises(ValueError, match="true or false"):
        v.parse_bool("maybe")


def test_container_paths_are_absolute() -> None:
    assert v.parse_container_path("/models/m x") == "/models/m x"
    for bad in ("models/m", "-x", "", "/m\r\n", "/m\t"):
        with pytest.raises(ValueError):
            v.parse_container_path(bad)


def test_served_name_cannot_look_like_a_flag() -> None:
    assert v.parse_served_name("qwen3-$x'\"") == "qwen3-$x'\""
    with pytest.raises(ValueError, match="start with '-'"):
        v.parse_served_name("--api-key")
