"""`up` and `use`: swap a variant in, or change the live set (Docker or Kubernetes)."""

from __future__ import annotations

import json
from collections.abc import Callable
from functools import partial
from typing import TYPE_CHECKING, Any

import click

from composer.cli.base import Context, command, require_api_key
from composer.cli.output import LiveLine, note, outcome_line, warning
from composer.cli.params import SwapArgs, complete_from_stack, swap_options, target_option
from composer.errors import ConfigError, SwapFailed
from composer.render.prometheus import PROFILE_SERVICES

if TYPE_CHECKING:
    from composer.swap.outcome import UpResult


def report_swap(
    variant: str,
    as_json: bool,
    run: Callable[[LiveLine], UpResult],
    where: str = "",
    dry_run: bool = False,
    project: str | None = None,
) -> None:
    """Run a swap with a live progress line; print its warnings, notes and outcome (or JSON).
    A failed swap's error gets the variant and the outcome for the `--json` error object.

    Warnings and notes about the stack are said before the swap changes anything, once per
    `project` (its state folder remembers them; `--json` still lists them every time)."""
    from composer.swap.journal import first_time

    line = LiveLine(partial(first_time, project) if project else None)
    try:
        result = run(line)
    except SwapFailed as err:
        line.finish()
        err.details.update(variant=variant, outcome="rolled-back" if err.rolled_back else "failed")
        raise
    line.finish()
    for text in result.warnings:
        if text not in line.said:
            warning(text)
    for text in result.notes:
        if text not in line.said:
            note(text)
    if as_json:
        click.echo(json.dumps(result.to_json()))
    elif dry_run:
        click.echo(result.plan_text or f"{variant}: {result.outcome}")
    else:
        click.echo(outcome_line(variant, result, where))
    if dry_run and result.outcome == "refused":
        raise SystemExit(2)  # the plan was printed; `up` itself would refuse it (a usage error)


def up_variants(
    obj: Context, variants: tuple[str, ...], args: SwapArgs, kube_context: str | None = None
) -> None:
    """`up` on Docker, or with `kube_context` set (possibly to "") on Kubernetes: one entry
    decides from one snapshot (`composer.swap.entry.up_set`, `composer.kube.execute.up_kubernetes`)."""
    from composer.swap.desired import check_request

    stack = obj.stack()
    check_request(variants, stack)  # unknown, refused or overlapping names: exit 2 before the engine
    name = "+".join(variants or stack.gateway.live)
    if kube_context is None:
        from composer.swap.entry import up_set

        require_api_key(stack, args.weak_key_allowed(obj))
        options = args.up_options(obj, stack.probation)
        report_swap(
            name,
            args.as_json,
            project=stack.project,
            run=lambda line: up_set(
                stack,
                variants,
                client=obj.docker(),
                options=options,
                progress=line.step,
                waiting=line.waiting,
            ),
            dry_run=args.dry_run,
        )
        return
    from composer.kube.execute import up_kubernetes
    from composer.kube.kubectl import Kubectl

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
    kubectl = Kubectl.for_stack(stack, kube_context or None)
    options = args.up_options(obj)
    report_swap(
        name,
        args.as_json,
        lambda line: up_kubernetes(stack, variants, kubectl, options, line.step, line.waiting),
        " on Kubernetes",
    )


def _recreate_gateway(obj: Context, variant: str | None, target: str, args: SwapArgs) -> None:
    """`up --recreate-gateway`: a new gateway container, the serving variant untouched
    (`--dry-run`: what it would replace, nothing changed)."""
    from composer.engine.port_gap import describe
    from composer.swap.gateway_port import plan_recreate, recreate_gateway

    stack = obj.stack()
    if target != "compose":
        raise ConfigError(
            "--recreate-gateway works on the compose target (a Kubernetes gateway is a Deployment)"
        )
    if variant is not None:
        stack.variant(variant)  # an unknown name: exit 2 before anything changes
    require_api_key(stack, args.weak_key_allowed(obj))
    if args.dry_run:
        from composer.swap.outcome import UpResult

        plan = plan_recreate(stack, obj.docker())
        done = UpResult(plan.serving or "", "planned", plan=plan.as_data(), plan_text=plan.describe())
        said = plan.describe()
    else:
        line = LiveLine()
        try:
            done = recreate_gateway(stack, obj.docker(), wait_for_lock=not args.no_wait, progress=line.step)
        finally:
            line.finish()
        gap = f"; {describe(done.port_gap)}" if done.port_gap is not None else ""
        said = f"{done.notes[0]} ({done.timings['total']:.1f}s){gap}"
    if args.as_json and variant is None:
        click.echo(json.dumps(done.to_json()))
    else:  # before the swap of VARIANT, on stderr (with --json, even a dry run's)
        click.echo(said, err=variant is not None and (args.as_json or not args.dry_run))


@command()
@click.argument("variants", nargs=-1, shell_complete=complete_from_stack("variant"))
@swap_options
@click.option(
    "--recreate-gateway",
    is_flag=True,
    help="Replace only the gateway's container: a new one starts beside the old one, so the port stays "
    "open (with a dead published port, its port holder is recreated too). The serving variant keeps "
    "running. With VARIANT, swap it in afterwards.",
)
@target_option
@click.option(
    "--with",
    "with_profiles",
    multiple=True,
    type=click.Choice(tuple(PROFILE_SERVICES)),
    help="Also start an optional service of the compose files once VARIANT (or the live set) serves "
    "(repeatable): prometheus scrapes the gateway and the variant(s); follow runs `compose-spec follow` in a "
    "container given the Docker socket, i.e. Docker's full power (both off unless asked for).",
)
@click.option(
    "--kube-context",
    metavar="NAME",
    help="With --target kubernetes: the kubeconfig context kubectl uses [default: kubernetes.context, "
    "env KUBE_CONTEXT, else the current one].",
)
@click.pass_obj
def up(
    obj: Context,
    variants: tuple[str, ...],
    target: str,
    recreate_gateway: bool,
    kube_context: str | None,
    with_profiles: tuple[str, ...],
    **opts: Any,
) -> None:
    """Swap VARIANT in: stop the old one, start and health-gate the new one, roll back on failure.

    One VARIANT is that variant alone: a plain switch. While a live set runs it replaces the
    set (--dry-run says `replace` and what leaves): VARIANT starts and is gated, the gateway
    goes back to it alone, then each member is drained and stopped. `up VARIANT` is how to go
    back from a live set to switching one variant at a time.

    With several VARIANTS, or none and [gateway] live: the live set becomes exactly those
    (variants serving at once on disjoint GPUs), changed one container at a time: start and
    gate each new one, then drain and stop each leaving one; the others serve throughout, and
    a failure or Ctrl-C undoes what ran (--dry-run prints the operations, `join` or `replace`).

    With --target kubernetes: the gateway drained through kubectl exec, kubectl apply -k,
    rollout status, the same gate through the Service, the hold released, and kubectl
    rollout undo (under the hold) on failure or Ctrl-C; a live set changes one Deployment
    at a time, each new one gated before a leaving one is drained and deleted; one VARIANT
    replaces a live set the cluster runs, as on Docker.

    \b
    Examples:
      compose-spec up mtp
      compose-spec up dflash2 --timeout 20m --json --env-file .env.demo
      compose-spec up mtp --target kubernetes --kube-context gpu-cluster
      compose-spec up baseline mtp --dry-run
      compose-spec up baseline               # from a live set: baseline alone
      compose-spec up --recreate-gateway
      compose-spec up mtp --with prometheus
      compose-spec up mtp --with follow
      compose-spec up mtp --force-recreate   # restart it, clients held
    """
    args = SwapArgs(**opts, profiles=tuple(dict.fromkeys(with_profiles)))
    if args.force_recreate and (target != "compose" or len(variants) != 1 or recreate_gateway):
        raise ConfigError(
            "--force-recreate restarts one variant on Docker: compose-spec up VARIANT --force-recreate"
        )
    if target == "kubernetes" and not recreate_gateway:
        up_variants(obj, variants, args, kube_context or "")
        return
    if len(variants) > 1 and recreate_gateway:
        raise ConfigError("several variants (a live set) cannot be combined with --recreate-gateway")
    variant = variants[0] if variants else None
    if recreate_gateway:
        if variant is None and args.profiles:
            raise ConfigError(
                "--with starts its service once a VARIANT serves: give one, e.g. up mtp --with prometheus"
            )
        _recreate_gateway(obj, variant, target, args)
        if variant is None:
            return
    if kube_context:
        raise ConfigError(
            "--kube-context needs --target kubernetes (Docker's engine is chosen with --context)"
        )
    up_variants(obj, variants, args)


@command()
@click.argument("workload", shell_complete=complete_from_stack("workload"))
@swap_options
@click.pass_obj
def use(obj: Context, workload: str, **opts: Any) -> None:
    """Swap to the variant mapped to WORKLOAD in composer.toml ([workloads]).

    \b
    Examples:
      compose-spec use chat-1
      compose-spec use long-16 --json
    """
    variant = obj.stack().workload_variant(workload).name
    up_variants(obj, (variant,), SwapArgs(**opts))
