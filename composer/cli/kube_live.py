"""`up --target kubernetes`: the checks of the request, then the one Kubernetes entry
(`composer.kube.execute.up_kubernetes`), which reads the cluster once and decides there."""

from __future__ import annotations

from typing import TYPE_CHECKING

from composer.cli.context import Context, require_api_key
from composer.cli.output import LiveLine
from composer.cli.swap_args import SwapArgs, report_swap
from composer.errors import ConfigError

if TYPE_CHECKING:
    from composer.kube.rollout import KubeUpResult
    from composer.swap.live import LiveResult


def kube_live_up(obj: Context, variants: tuple[str, ...], kube_context: str | None, args: SwapArgs) -> None:
    """`up --target kubernetes [VARIANTS]`: the desired set as on Docker (one VARIANT alone,
    replacing a live set the cluster runs; several side by side; none `[gateway] live`)."""
    from composer.kube.execute import up_kubernetes
    from composer.kube.kubectl import Kubectl
    from composer.kube.rollout import KubeUpOptions
    from composer.swap.desired import check_request

    stack = obj.stack()
    check_request(variants, stack)  # unknown or refused names: exit 2 before kubectl is asked
    if args.dry_run:
        raise ConfigError("--dry-run works on the compose target (kubectl diff shows a rollout's change)")
    if args.profiles:
        raise ConfigError(
            "--with starts a service of the compose files; on Kubernetes the ServiceMonitor "
            "([kubernetes] service_monitor) lets the cluster's Prometheus scrape"
        )
    if obj.options.docker_context:
        raise ConfigError(
            "--context names a Docker context; with --target kubernetes use --kube-context NAME"
        )
    if stack.api_key:  # the Secret is made from it
        require_api_key(stack, args.weak_key_allowed(obj))
    kubectl = Kubectl.for_stack(stack, kube_context)
    options = KubeUpOptions(
        timeout=args.timeout, rollback=not args.no_rollback, wait_for_lock=not args.no_wait, drain=args.drain
    )

    def run(line: LiveLine) -> KubeUpResult | LiveResult:
        return up_kubernetes(
            stack, variants, kubectl=kubectl, options=options, progress=line.step, waiting=line.waiting
        )

    report_swap("+".join(variants or stack.gateway.live), args.as_json, run, " on Kubernetes")
