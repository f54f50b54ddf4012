"""A systemd unit that keeps `compose-spec follow` running, escaped the way systemd reads it."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

_BARE = re.compile(r"[A-Za-z0-9_./:=,+@-]+")


def _specifiers(text: str) -> str:
    """`%` starts a systemd specifier: a literal one is written `%%`."""
    return text.replace("%", "%%")


def quote_word(word: str) -> str:
    """One ExecStart= word: bare when safe, else quoted; `%` and `$` doubled."""
    word = _specifiers(word).replace("$", "$$")
    if word and _BARE.fullmatch(word):
        return word
    escaped = word.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n").replace("\t", "\\t")
    return f'"{escaped}"'


def quote_assignment(name: str, value: str) -> str:
    """One Environment= item, `"NAME=VALUE"` quoted and escaped."""
    text = _specifiers(f"{name}={value}")
    escaped = text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
    return f'"{escaped}"'


@dataclass(frozen=True)
class FollowUnit:
    """What the unit runs: command (absolute executable first), folder, user, environment."""

    command: Sequence[str]
    working_directory: str
    project: str
    user: str | None = None
    environment: Mapping[str, str] = field(default_factory=dict)
    stop_timeout: int = 960


def render_follow_unit(unit: FollowUnit) -> str:
    """The unit file's text: exit 130 is a success, exit 2 is not restarted."""
    lines = [
        "# compose-spec follow as a systemd service. Install:",
        f"#   compose-spec follow --print-systemd-unit > compose-spec-follow-{unit.project}.service",
        f"#   sudo install -m 644 compose-spec-follow-{unit.project}.service /etc/systemd/system/",
        f"#   sudo systemctl daemon-reload && sudo systemctl enable --now compose-spec-follow-{unit.project}",
        "[Unit]",
        f"Description=compose-spec follow (project {_specifiers(unit.project)})",
        "After=docker.service network-online.target",
        "Wants=network-online.target",
        "",
        "[Service]",
        "Type=exec",
    ]
    if unit.user:
        lines.append(f"User={unit.user}")
    if "\n" in unit.working_directory:  # a path setting is taken whole, spaces included
        raise ValueError(
            f"{unit.working_directory!r}: a path with a line break cannot be written in a unit file"
        )
    lines.append(f"WorkingDirectory={_specifiers(unit.working_directory)}")
    for name, value in sorted(unit.environment.items()):
        lines.append(f"Environment={quote_assignment(name, value)}")
    lines += [
        "ExecStart=" + " ".join(quote_word(word) for word in unit.command),
        "Restart=on-failure",
        "RestartSec=5s",
        "SuccessExitStatus=130",
        "RestartPreventExitStatus=2",
        f"TimeoutStopSec={unit.stop_timeout}s",
        "",
        "[Install]",
        "WantedBy=multi-user.target",
        "",
    ]
    return "\n".join(lines)
