"""`up --target kubernetes`: a drained rollout of one variant (composer.kube.rollout), or a live
set changed one Deployment at a time (composer.kube.live_rollout)."""

from __future__ import annotations

from composer.cli.context import Context, require_api_key
from composer.cli.swap_args import SwapArgs, report_swap
from composer.errors import ConfigError


def kube_live_up(obj: Context, variants: tuple[str, ...], kube_context: str | None, args: SwapArgs) -> bool:
    """`up --target kubernetes` on a live set (several variants, `[gateway] live`, or a live
    set the cluster runs): change it one Deployment at a time. A set of one variant with no
    live Deployment on the cluster is today's rollout. False: not live (nothing was asked)."""
    from composer.kube.live_rollout import live_set_names, ran_kube_live, read_cluster, up_kube_live

    stack = obj.stack()
    for name in variants:
        stack.startable(name)  # an unknown or refused name: exit 2 before kubectl is asked anything
    if len(variants) <= 1 and not stack.gateway.live and not ran_kube_live(stack):
        return False
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
    from composer.kube.kubectl import Kubectl
    from composer.kube.rollout import KubeUpOptions
    from composer.stack.placement import live_members

    if len(variants) > 1:
        live_members(stack, variants)  # overlapping GPU sets: exit 2 before kubectl is asked anything
    if stack.api_key:  # the Secret is made from it
        require_api_key(stack, args.weak_key_allowed(obj))
    kubectl = Kubectl.for_stack(stack, kube_context)
    if len(variants) <= 1:
        cluster = read_cluster(kubectl, stack)
        names = live_set_names(variants, stack, cluster)
        if len(names) <= 1 and not cluster.live:
            if not names:
                return False  # `up` asks for a VARIANT
            kube_up(obj, names[0], kube_context, args)
            return True

    options = KubeUpOptions(
        timeout=args.timeout, rollback=not args.no_rollback, wait_for_lock=not args.no_wait, drain=args.drain
    )
    report_swap(
        "+".join(variants or stack.gateway.live),
        args.as_json,
        lambda line: up_kube_live(
            stack, variants, kubectl=kubectl, options=options, progress=line.step, waiting=line.waiting
        ),
        " on Kubernetes",
    )
    return True


def kube_up(obj: Context, variant: str, kube_context: str | None, args: SwapArgs) -> None:
    """`up --target kubernetes`: a drained rollout of the variant's overlay, undone on failure."""
    from composer.kube.kubectl import Kubectl
    from composer.kube.rollout import KubeUpOptions, up_kubernetes
    from composer.render.target import resolve_target

    if obj.options.docker_context:
        raise ConfigError(
            "--context names a Docker context; with --target kubernetes use --kube-context NAME"
        )
    stack = obj.stack()
    if stack.api_key:  # the Secret is made from it
        require_api_key(stack, args.weak_key_allowed(obj))
    options = KubeUpOptions(
        timeout=args.timeout, rollback=not args.no_rollback, wait_for_lock=not args.no_wait, drain=args.drain
    )
    report_swap(
        variant,
        args.as_json,
        lambda line: up_kubernetes(
            stack,
            resolve_target(stack, stack.startable(variant).name),  # refused: exit 2, nothing rolls
            kubectl=Kubectl.for_stack(stack, kube_context),
            options=options,
            progress=line.step,
            waiting=line.waiting,
        ),
        " on Kubernetes",
    )
