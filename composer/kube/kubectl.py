"""The one place that runs `kubectl`: argv lists, never a shell; errors carry the command."""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass

from composer.errors import KubectlFailed
from composer.stack.model import Stack


@dataclass(frozen=True)
class Kubectl:
    """`kubectl` (the stack's `kubernetes.kubectl`, env KUBECTL) in one namespace ('' = current)."""

    binary: str
    namespace: str = ""

    @classmethod
    def for_stack(cls, stack: Stack) -> Kubectl:
        """The kubectl the stack names, found on PATH; KubectlFailed when it is missing."""
        found = shutil.which(stack.kubernetes.kubectl)
        if not found:
            raise KubectlFailed(
                f"kubectl {stack.kubernetes.kubectl!r} is not on PATH: install kubectl or set "
                "kubernetes.kubectl (env KUBECTL) to its path"
            )
        return cls(found, stack.kubernetes.namespace)

    def argv(self, args: Sequence[str]) -> list[str]:
        """The full command line for `kubectl ARGS` in this namespace."""
        namespace = ["--namespace", self.namespace] if self.namespace else []
        return [self.binary, *namespace, *args]

    def run(
        self, args: Sequence[str], *, stdin: str | None = None, timeout: float = 60, check: bool = True
    ) -> subprocess.CompletedProcess[str]:
        """Run `kubectl ARGS` (stdin text, if any, is the only way a secret is passed)."""
        argv = self.argv(args)
        shown = "kubectl " + " ".join(args)
        try:
            done = subprocess.run(
                argv,
                input=stdin if stdin is not None else "",
                capture_output=True,
                text=True,
                timeout=timeout,
                check=False,
            )
        except subprocess.TimeoutExpired as err:
            raise KubectlFailed(f"`{shown}` did not finish within {timeout:.0f} s", tuple(argv)) from err
        except OSError as err:
            raise KubectlFailed(f"cannot run `{shown}`: {err}", tuple(argv)) from err
        if check and done.returncode != 0:
            raise KubectlFailed(f"`{shown}` failed: {last_line(done)}", tuple(argv), done.returncode)
        return done

    def popen(self, args: Sequence[str]) -> subprocess.Popen[str]:
        """Start a long-running `kubectl ARGS` (port-forward) with its stdout piped."""
        return subprocess.Popen(
            self.argv(args),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )


def last_line(done: subprocess.CompletedProcess[str]) -> str:
    """The last non-empty line kubectl printed (its error), or the exit code."""
    lines = [line for line in (done.stderr or done.stdout or "").splitlines() if line.strip()]
    return lines[-1].strip() if lines else f"exit code {done.returncode}"
