"""The one place that runs `kubectl`: argv lists, never a shell; errors carry the command.

Everything kubectl says that reaches a message is redacted of the API key (in clear or
base64) first; a cluster that cannot be reached gets a fix line.
"""

from __future__ import annotations

import base64
import os
import re
import shutil
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass

from composer.engine.bootlog import redact as redact_log
from composer.errors import KubectlFailed
from composer.stack.model import Stack

_UNREACHABLE = re.compile(
    r"Unable to connect to the server|The connection to the server .* was refused|"
    r"couldn't get current server API group list|no configuration has been provided|"
    r"context \S+ does not exist|dial tcp|no such host|i/o timeout|connection refused|"
    r"the server has asked for the client to provide credentials|You must be logged in to the server",
    re.IGNORECASE,
)
FIX_UNREACHABLE = (
    "fix: `kubectl config current-context` names the cluster kubectl uses; choose another with "
    "`up --kube-context NAME` (kubernetes.context, env KUBE_CONTEXT) or point KUBECONFIG at its kubeconfig"
)


def secret_forms(secret: str | None) -> tuple[str, ...]:
    """The ways a secret can appear in kubectl's output: as is, base64, JSON-escaped."""
    if not secret:
        return ()
    encoded = base64.b64encode(secret.encode()).decode()
    return (secret, encoded, encoded.rstrip("="), secret.encode("unicode_escape").decode())


@dataclass(frozen=True)
class Kubectl:
    """`kubectl` (the stack's `kubernetes.kubectl`, env KUBECTL) in one namespace ('' = current),
    one kube context ('' = current) and kubeconfig ('' = kubectl's default)."""

    binary: str
    namespace: str = ""
    context: str = ""
    kubeconfig: str = ""
    secrets: tuple[str, ...] = ()

    @classmethod
    def for_stack(cls, stack: Stack, context: str | None = None) -> Kubectl:
        """The kubectl the stack names, found on PATH; KubectlFailed when it is missing."""
        found = shutil.which(stack.kubernetes.kubectl)
        if not found:
            raise KubectlFailed(
                f"kubectl {stack.kubernetes.kubectl!r} is not on PATH: install kubectl or set "
                "kubernetes.kubectl (env KUBECTL) to its path"
            )
        return cls(
            found,
            stack.kubernetes.namespace,
            context or stack.kubernetes.context,
            stack.kubernetes.kubeconfig,
            secret_forms(stack.api_key),
        )

    def argv(self, args: Sequence[str]) -> list[str]:
        """The full command line for `kubectl ARGS` in this context and namespace."""
        context = ["--context", self.context] if self.context else []
        namespace = ["--namespace", self.namespace] if self.namespace else []
        return [self.binary, *context, *namespace, *args]

    def environment(self) -> dict[str, str]:
        """kubectl's environment: ours, with KUBECONFIG when the stack sets one."""
        return {**os.environ, **({"KUBECONFIG": self.kubeconfig} if self.kubeconfig else {})}

    def redact(self, text: str) -> str:
        """Text with every form of every secret masked (the same masking as container logs)."""
        for secret in sorted(self.secrets, key=len, reverse=True):
            text = redact_log(text, secret)
        return text

    def run(
        self, args: Sequence[str], *, stdin: str | None = None, timeout: float = 60, check: bool = True
    ) -> subprocess.CompletedProcess[str]:
        """Run `kubectl ARGS` (stdin text, if any, is the only way a secret is passed)."""
        argv = self.argv(args)
        shown = self.redact("kubectl " + " ".join(args))
        try:
            done = subprocess.run(
                argv,
                input=stdin if stdin is not None else "",
                capture_output=True,
                text=True,
                timeout=timeout,
                check=False,
                env=self.environment(),
            )
        except subprocess.TimeoutExpired as err:
            raise KubectlFailed(f"`{shown}` did not finish within {timeout:.0f} s", tuple(argv)) from err
        except OSError as err:
            raise KubectlFailed(f"cannot run `{shown}`: {err}", tuple(argv)) from err
        if check and done.returncode != 0:
            raise self.failed(f"`{shown}` failed", done)
        return done

    def failed(self, what: str, done: subprocess.CompletedProcess[str]) -> KubectlFailed:
        """KubectlFailed for a finished command: the last line it printed (else its exit code),
        redacted; a fix when the cluster cannot be reached."""
        lines = [line.strip() for line in (done.stderr or done.stdout or "").splitlines() if line.strip()]
        said = self.redact(lines[-1] if lines else f"exit code {done.returncode}")
        fix = f"; {FIX_UNREACHABLE}" if _UNREACHABLE.search(said) else ""
        command = tuple(done.args) if isinstance(done.args, list | tuple) else ()
        return KubectlFailed(f"{what}: {said}{fix}", command, done.returncode)

    def popen(self, args: Sequence[str]) -> subprocess.Popen[str]:
        """Start a long-running `kubectl ARGS` (port-forward) with its stdout piped."""
        return subprocess.Popen(
            self.argv(args),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env=self.environment(),
        )
