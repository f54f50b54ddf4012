"""`up --target kubernetes`: one entry for the switch of the one-variant Deployment and a live
set's change, both run by `composer.kube.execute` (one plan of typed operations, one executor)."""

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
    """`up --target kubernetes`: a live set's change (several variants, `[gateway] live`, or a
    live set the cluster runs, which one variant joins), else the switch of the one-variant
    Deployment."""
    from composer.kube.execute import live_set_names, ran_kube_live, read_cluster, up_kubernetes
    from composer.kube.kubectl import Kubectl
    from composer.render.target import resolve_target
    from composer.stack.placement import live_members
    from composer.swap.swapper import UpOptions

    stack = obj.stack()
    for name in variants:
        stack.startable(name)  # an unknown or refused name: exit 2 before kubectl is asked anything
    nothing = ConfigError(f"up needs a VARIANT: one of {', '.join(stack.variants)}")
    live = len(variants) > 1 or bool(stack.gateway.live) or ran_kube_live(stack)
    if not variants and not live:
        raise nothing
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
    if len(variants) > 1:
        live_members(stack, variants)  # overlapping GPU sets: exit 2 before kubectl is asked anything
    if stack.api_key:  # the Secret is made from it
        require_api_key(stack, args.weak_key_allowed(obj))
    kubectl = Kubectl.for_stack(stack, kube_context)
    names = list(variants)
    if live and len(variants) <= 1:
        cluster = read_cluster(kubectl, stack)
        names = live_set_names(variants, stack, cluster)
        live = len(names) > 1 or bool(cluster.live)
        if not names:
            raise nothing
    options = UpOptions(
        timeout=args.timeout, rollback=not args.no_rollback, wait_for_lock=not args.no_wait, drain=args.drain
    )

    def run(line: LiveLine) -> KubeUpResult | LiveResult:
        target = variants if live else resolve_target(stack, names[0])
        return up_kubernetes(stack, target, kubectl, options, line.step, line.waiting)

    label = "+".join(variants or stack.gateway.live) if live else names[0]
    report_swap(label, args.as_json, run, " on Kubernetes")
