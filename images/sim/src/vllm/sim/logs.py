"""vLLM-format log lines: ``(APIServer pid=1) INFO 11-29 10:00:00 [file.py:123] message``."""

from __future__ import annotations

import os
import sys
import time
from typing import TextIO


class VllmLog:
    """Writes vLLM-looking log lines, flushed at once."""

    def __init__(self, process: str, stream: TextIO | None = None) -> None:
        self._prefix = f"({process} pid={os.getpid()}) "
        self._stream = stream

    def _write(self, level: str, where: str, message: str) -> None:
        stamp = time.strftime("%m-%d %H:%M:%S")
        stream = self._stream or sys.stdout
        for line in message.splitlines() or [""]:
            stream.write(f"{self._prefix}{level} {stamp} [{where}] {line}\n")
        stream.flush()

    def info(self, where: str, message: str) -> None:
        self._write("INFO", where, message)

    def warning(self, where: str, message: str) -> None:
        self._write("WARNING", where, message)

    def error(self, where: str, message: str) -> None:
        self._write("ERROR", where, message)

    def raw(self, text: str, to_stderr: bool = True) -> None:
        """Unformatted text (tracebacks), prefixed per line like vLLM's subprocess output."""
        stream = sys.stderr if to_stderr else (self._stream or sys.stdout)
        for line in text.splitlines():
            stream.write(f"{self._prefix}{line}\n")
        stream.flush()


def traceback_text(frames: list[tuple[str, int, str]], exception: str) -> str:
    """A short Python-style traceback ending with ``exception``."""
    lines = ["Traceback (most recent call last):"]
    for path, line, func in frames:
        lines.append(f'  File "{path}", line {line}, in {func}')
    lines.append(exception)
    return "\n".join(lines)
