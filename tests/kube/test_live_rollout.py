"""`compose-spec up A B --target kubernetes`: a live set changed one Deployment at a time,
against the recording kubectl stand-in and a real gateway (its control socket)."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from composer.gateway.host.client import GatewayControl
from composer.kube.execute import ClusterLive, plan_kube_live
from composer.stack.load import load_stack
from composer.swap.transaction import single_inflight
from tests.conftest import REPO
from tests.gateway.fakes import GatewayThread, LocalExec
from tests.sim.simproc import SimProcess

from .conftest import KEY, MODEL, SERVED, Standin


@pytest.fixture(autouse=True)
def single_upstream_after(gateway: GatewayThread) -> Iterator[None]:
    """The module's gateway goes back to its single upstream after each test."""
    yield
    GatewayControl(LocalExec(gateway.config.control_socket)).set_upstreams([])


@pytest.fixture(scope="module")
def drafting(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SimProcess]:
    """A simulator with MTP drafting (its /metrics count drafted and accepted tokens): the pod
    behind a speculative variant's Service."""
    spec = json.dumps({"method": "mtp", "num_speculative_tokens": 7})
    server = SimProcess.start(
        [MODEL, "--served-model-name", SERVED, "--speculative-config", spec],
        api_key=KEY,
        log_dir=tmp_path_factory.mktemp("sim"),
    )
    yield server.wait_ready()
    server.stop()


UP = ("--target", "kubernetes", "--timeout", "20")
OPENING = [
    "get deployments",
    "apply --server-side",
    "get secret/vllm-api-key",
    "get deployment/vllm-gateway",
    "apply --kustomize",
    "rollout status",
]
"""What a live change asks kubectl first: the set, the stack-wide objects, the key and the
gateway; then the first variant it starts, applied and rolled out."""
BASELINE_AND_MTP = {
    "deployment.apps/vllm-baseline",
    "service/vllm-baseline",
    "deployment.apps/vllm-mtp",
    "service/vllm-mtp",
}
PLACED = (
    "--set",
    "variants.baseline.gpus=0,1",
    "--set",
    "variants.mtp.gpus=2,3",
    "--set",
    "variants.dflash2.gpus=4,5",
)
VARIANTS = ("baseline", "mtp", "dflash2")
FAILURE_LOG = "INFO loading weights\nRuntimeError: UVA is not available on this platform\n"


def _addr(server: SimProcess | GatewayThread) -> str:
    return f"127.0.0.1:{server.port}"


@pytest.fixture
def services(backend: SimProcess, drafting: SimProcess) -> dict[str, str]:
    """Each live variant's Service: a simulator serving the stack's name, a drafting one for
    the speculative variants (their acceptance is checked before they get traffic)."""
    return {v: _addr(backend if v == "baseline" else drafting) for v in VARIANTS}


def _scenario(standin: Standin, services: dict[str, str], **values: object) -> None:
    standin.scenario(backends=services, **values)


def _live_objects(standin: Standin) -> set[str]:
    """The live variants' Deployments and Services on the cluster."""
    names = tuple(f"{kind}/vllm-{v}" for kind in ("deployment.apps", "service") for v in VARIANTS)
    return {k for k in standin.state()["objects"] if k in names}


def _upstreams(gateway: GatewayThread) -> list[str]:
    """The gateway's live set, by member name (the ones not leaving)."""
    return sorted(gateway.gateway.live.members)


def _serve_baseline_and_mtp(standin: Standin, run_cli, services: dict[str, str]) -> None:
    _scenario(standin, services)
    done = run_cli(*PLACED, "up", "baseline", "mtp", *UP)
    assert done.returncode == 0, done.stderr
    standin.forget_calls()


@pytest.mark.slow
def test_a_live_set_is_rolled_out_one_deployment_at_a_time(
    standin: Standin, run_cli, services: dict[str, str], gateway: GatewayThread
) -> None:
    _scenario(standin, services)
    done = run_cli(*PLACED, "up", "baseline", "mtp", *UP)
    assert done.returncode == 0, done.stderr
    assert "baseline+mtp: live set baseline, mtp on Kubernetes" in done.stdout
    commands = standin.commands()
    # No gateway yet: the stack-wide objects first, then each variant applied, rolled out,
    # gated through its own Service, and only then named in the gateway's upstreams.
    assert commands == [
        *OPENING,
        "apply --kustomize",
        "rollout status",
        "port-forward service/vllm-baseline",
        "get pods",
        "exec GET /state",
        "exec POST /upstreams",
        "apply --kustomize",
        "rollout status",
        "port-forward service/vllm-mtp",
        "exec POST /upstreams",
    ]
    statuses = [c["argv"][2] for c in standin.calls() if c["argv"][:2] == ["rollout", "status"]]
    assert statuses == ["deployment/vllm-gateway", "deployment/vllm-baseline", "deployment/vllm-mtp"]
    published = [
        json.loads(c["argv"][-1])["upstreams"] for c in standin.calls() if c["argv"][-2:-1] == ["/upstreams"]
    ]
    assert [[u["name"] for u in p] for p in published] == [["baseline/1"], ["baseline/1", "mtp/1"]]
    assert published[-1][1]["url"] == "http://vllm-mtp:8000"
    assert _live_objects(standin) == BASELINE_AND_MTP
    assert _upstreams(gateway) == ["baseline/1", "mtp/1"]
    mtp = standin.state()["objects"]["deployment.apps/vllm-mtp"]
    assert mtp["spec"]["template"]["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] == 2
    assert len(mtp["metadata"]["annotations"]["vllm-composer.live-config"]) == 16  # what `up` compares

    # Unchanged: nothing applied, the gateway told the set again.
    standin.forget_calls()
    again = run_cli(*PLACED, "up", "baseline", "mtp", *UP, "--json")
    assert again.returncode == 0, again.stderr
    assert json.loads(again.stdout)["outcome"] == "unchanged"
    assert "apply --kustomize" not in standin.commands() and "exec POST /upstreams" in standin.commands()


@pytest.mark.slow
def test_the_new_variant_is_ready_before_the_leaving_one_is_drained_and_deleted(
    standin: Standin, run_cli, services: dict[str, str], gateway: GatewayThread
) -> None:
    _serve_baseline_and_mtp(standin, run_cli, services)
    done = run_cli(*PLACED, "up", "baseline", "dflash2", *UP)
    assert done.returncode == 0, done.stderr
    commands = standin.commands()
    assert commands == [
        *OPENING,
        "port-forward service/vllm-dflash2",
        "get pods",
        "exec GET /state",
        "exec POST /upstreams",
        "exec POST /upstreams",
        "exec POST /upstreams/drain",
        "delete deployment/vllm-mtp",
        "apply --filename",
        "rollout status",
    ]
    calls = standin.calls()
    assert calls[4]["argv"][-1].endswith("/dflash2")
    assert calls[12]["argv"][1:] == ["deployment/vllm-mtp", "service/vllm-mtp", "--ignore-not-found"]
    assert (
        calls[11]["argv"][-2] == "/upstreams/drain" and json.loads(calls[11]["argv"][-1])["name"] == "mtp/1"
    )
    published = [json.loads(c["argv"][-1])["upstreams"] for c in calls if c["argv"][-2:-1] == ["/upstreams"]]
    # the Docker live set's plan: mtp serves beside the new member until it is taken out
    assert [[u["name"] for u in p] for p in published] == [
        ["baseline/1", "mtp/1", "dflash2/1"],
        ["baseline/1", "dflash2/1"],
    ]
    # The gateway's Deployment records the new set for a restarted pod.
    gateway_doc = standin.state()["objects"]["deployment.apps/vllm-gateway"]
    env = {e["name"]: e.get("value") for e in gateway_doc["spec"]["template"]["spec"]["containers"][0]["env"]}
    assert [u["name"] for u in json.loads(env["GATEWAY_LIVE_UPSTREAMS"])] == ["baseline/1", "dflash2/1"]
    assert "deployment.apps/vllm-mtp" not in _live_objects(standin)
    assert _upstreams(gateway) == ["baseline/1", "dflash2/1"]


@pytest.mark.slow
def test_one_variant_replaces_the_live_set_the_cluster_runs_then_switching_is_plain(
    standin: Standin, run_cli, services: dict[str, str], gateway: GatewayThread
) -> None:
    """`up X` is {X} alone on Kubernetes too: X's one-variant Deployment is applied, rolled out
    and gated before anything leaves; then the gateway goes back to its single upstream, each
    live Deployment is drained and deleted, and the gateway's Deployment is rolled last (its
    settings named the members)."""
    _serve_baseline_and_mtp(standin, run_cli, services)
    done = run_cli(*PLACED, "up", "dflash2", *UP, "--json")
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout.splitlines()[-1])
    assert out["outcome"] == "dflash2 serves alone (the live set left)"
    assert out["plan"]["mode"] == "replace" and out["plan"]["alone"] == "dflash2"
    commands = standin.commands()
    assert commands[0] == "get deployments"  # one read of what the cluster runs
    calls = standin.calls()
    applied = commands.index("apply --kustomize")
    assert calls[applied]["argv"][-1].endswith("/overlays/dflash2")  # the one-variant overlay
    gated = commands.index("port-forward service/vllm")
    published = commands.index("exec POST /upstreams")
    assert applied < gated < published < commands.index("exec POST /upstreams/drain")
    assert json.loads(calls[published]["argv"][-1])["upstreams"] == []  # back to the single upstream
    deleted = [c["argv"][1] for c in calls if c["argv"][0] == "delete"]
    assert deleted == ["deployment/vllm-baseline", "deployment/vllm-mtp"]
    assert commands[-2:] == ["apply --filename", "rollout status"]  # the gateway, rolled last
    gateway_doc = standin.state()["objects"]["deployment.apps/vllm-gateway"]
    env = {e["name"] for e in gateway_doc["spec"]["template"]["spec"]["containers"][0]["env"]}
    assert "GATEWAY_LIVE_UPSTREAMS" not in env
    assert _live_objects(standin) == set() and standin.serving() == "dflash2"
    assert _upstreams(gateway) == []

    standin.forget_calls()  # plain switching again: the one-variant Deployment rolls
    again = run_cli(*PLACED, "up", "baseline", *UP, "--json")
    assert again.returncode == 0, again.stderr
    assert "exec POST /upstreams" not in standin.commands() and standin.serving() == "baseline"


@pytest.mark.slow
def test_one_variant_that_fails_its_rollout_leaves_the_live_set_serving(
    standin: Standin, run_cli, services: dict[str, str], gateway: GatewayThread
) -> None:
    _serve_baseline_and_mtp(standin, run_cli, services)
    _scenario(standin, services, rollout={"dflash2": "fail"}, logs={"dflash2": FAILURE_LOG})
    done = run_cli(*PLACED, "up", "dflash2", *UP)
    assert done.returncode == 1 and "UVA is not available" in done.stderr
    assert "Traceback" not in done.stderr
    # nothing left the set; the one-variant Deployment it applied is deleted again
    assert "exec POST /upstreams/drain" not in standin.commands()
    assert standin.commands()[-1] == "delete deployment/vllm"
    assert (
        _live_objects(standin) == BASELINE_AND_MTP
        and "deployment.apps/vllm" not in standin.state()["objects"]
    )
    assert _upstreams(gateway) == ["baseline/1", "mtp/1"]


@pytest.mark.slow
def test_a_variant_whose_configuration_changed_is_drained_then_re_applied(
    standin: Standin, run_cli, services: dict[str, str], gateway: GatewayThread
) -> None:
    _serve_baseline_and_mtp(standin, run_cli, services)
    done = run_cli(*PLACED, "--set", "variants.mtp.gpus=2,3,6,7", "up", "baseline", "mtp", *UP)
    assert done.returncode == 0, done.stderr
    commands = standin.commands()
    assert commands[4:] == [
        "get pods",
        "exec GET /state",
        "exec POST /upstreams",
        "exec POST /upstreams/drain",
        "apply --kustomize",
        "rollout status",
        "port-forward service/vllm-mtp",
        "exec POST /upstreams",
    ]  # the gateway's recorded list is the same: its Deployment is left alone
    published = [
        json.loads(c["argv"][-1])["upstreams"] for c in standin.calls() if c["argv"][-2:-1] == ["/upstreams"]
    ]
    assert [[u["name"] for u in p] for p in published] == [["baseline/1"], ["baseline/1", "mtp/1"]]
    mtp = standin.state()["objects"]["deployment.apps/vllm-mtp"]
    assert mtp["spec"]["template"]["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] == 4


class _Stream(threading.Thread):
    """A long streamed completion through the gateway, read until `stop` is set."""

    def __init__(self, gateway: GatewayThread) -> None:
        super().__init__(daemon=True)
        self.url = f"http://127.0.0.1:{gateway.port}/v1/completions"
        self.stop = threading.Event()
        self.status = 0
        self.closed_at = 0.0

    def run(self) -> None:
        body = {
            "model": SERVED,
            "prompt": "drain me",
            "max_tokens": 100000,
            "ignore_eos": True,
            "stream": True,
        }
        auth = {"Authorization": f"Bearer {KEY}"}
        with (
            httpx.Client(timeout=300.0, trust_env=False) as http,
            http.stream("POST", self.url, json=body, headers=auth) as reply,
        ):
            self.status = reply.status_code
            for _ in reply.iter_bytes():
                if self.stop.is_set():
                    break
        self.closed_at = time.time()


def _wait(condition, what: str, timeout: float = 120.0) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"never: {what}"
        time.sleep(0.1)


@pytest.mark.slow
def test_the_one_variant_deployment_is_drained_then_deleted_once_the_live_set_serves(
    standin: Standin, run_cli, services: dict[str, str], gateway: GatewayThread
) -> None:
    standin.scenario(backends={"baseline": _addr(gateway)})
    single = run_cli(*PLACED, "up", "baseline", *UP)
    assert single.returncode == 0, single.stderr
    standin.forget_calls()
    _scenario(standin, services)
    control = GatewayControl(LocalExec(gateway.config.control_socket))
    stream = _Stream(gateway)  # in flight on the one-variant Deployment (the gateway's single upstream)
    stream.start()
    _wait(lambda: single_inflight(control.state().raw) == 1, "the stream is in flight")
    up = run_cli(*PLACED, "up", "baseline", "mtp", *UP, "--json", popen=True)
    try:

        def polls_after_publishing() -> int:
            commands = standin.commands()
            published = [i for i, c in enumerate(commands) if c == "exec POST /upstreams"]
            return commands[published[-1] :].count("exec GET /state") if len(published) == 2 else 0

        def deleted() -> bool:
            return "delete deployment/vllm" in standin.commands()

        # The live set takes the new requests; the gateway is asked (twice) what still runs on
        # the one-variant Deployment, which is not deleted while the stream runs.
        _wait(
            lambda: polls_after_publishing() >= 2 or deleted() or up.poll() is not None, "a drain or an end"
        )
        assert not deleted() and up.poll() is None
        assert polls_after_publishing() >= 2
    except BaseException:
        up.kill()
        raise
    finally:
        stream.stop.set()
        stream.join(timeout=30)
    out, err = up.communicate(timeout=300)
    assert up.returncode == 0, err
    assert stream.status == 200
    deletion = next(c for c in standin.calls() if c["argv"][:2] == ["delete", "deployment/vllm"])
    assert deletion["t"] > stream.closed_at  # deleted once nothing ran on it
    assert json.loads(out.splitlines()[-1])["drained"] == {"cut": 0, "continued": 0, "refused": 0}
    assert single_inflight(control.state().raw) == 0
    commands = standin.commands()
    assert "apply --kustomize" in commands and commands.count("exec POST /upstreams") == 2
    assert "deployment.apps/vllm" not in standin.state()["objects"]
    assert commands[-2:] == ["apply --filename", "rollout status"]  # the gateway records the set


def test_the_requests_on_the_one_variant_deployment_are_counted_apart_from_the_live_ones() -> None:
    raw = {
        "inflight": 5,
        "upstreams": [{"name": "baseline/1", "outstanding": 2}, {"name": "mtp/1", "outstanding": 1}],
    }
    assert single_inflight(raw) == 2
    assert single_inflight({"inflight": 1, "upstreams": [{"name": "mtp/1", "outstanding": 1}]}) == 0
    assert single_inflight({"inflight": 3}) == 3 and single_inflight(None) == 0
    # the gateway's own count, where its image reports it, over the subtraction
    assert single_inflight({**raw, "single_outstanding": 1}) == 1
    assert single_inflight({"inflight": 3, "single_outstanding": 0}) == 0
    # this gateway's: the single member is one of `upstreams`, listed while requests run on it
    assert single_inflight({**raw, "generation": 3, "upstreams": [{"name": "single", "outstanding": 4}]}) == 4
    assert single_inflight({**raw, "generation": 3}) == 0


@pytest.mark.slow
def test_a_speculative_variant_whose_acceptance_fails_is_deleted_and_the_set_serves_on(
    standin: Standin, run_cli, services: dict[str, str], backend: SimProcess, gateway: GatewayThread
) -> None:
    _serve_baseline_and_mtp(standin, run_cli, services)
    # dflash2's Service reaches a server that never drafts: ready, answering, and no faster.
    _scenario(standin, {**services, "dflash2": _addr(backend)})
    done = run_cli(*PLACED, "up", "baseline", "mtp", "dflash2", *UP, "--json")
    assert done.returncode == 1, done.stderr
    # the Docker live set's words: the operation that failed, why, and that it was undone
    assert "gate dflash2/1 on its own address" in done.stderr
    assert "failed: dflash2 drafted no tokens over its warm-up; undone" in done.stderr
    assert "Traceback" not in done.stderr
    assert json.loads(done.stdout.splitlines()[-1])["outcome"] == "rolled-back"
    commands = standin.commands()
    # gated through its own Service (the acceptance check in the same port-forward), never published
    assert commands[-4:] == [
        "rollout status",
        "port-forward service/vllm-dflash2",
        "logs deployment/vllm-dflash2",
        "delete deployment/vllm-dflash2",
    ]
    assert "exec POST /upstreams" not in commands
    assert "deployment.apps/vllm-dflash2" not in _live_objects(standin)
    assert _upstreams(gateway) == ["baseline/1", "mtp/1"]


@pytest.mark.slow
def test_a_speculative_variant_at_or_below_the_acceptance_floor_never_gets_traffic(
    standin: Standin, run_cli, services: dict[str, str], gateway: GatewayThread
) -> None:
    _scenario(standin, services)
    done = run_cli(*PLACED, "--set", "stack.acceptance_floor=0.99", "up", "baseline", "mtp", *UP)
    assert done.returncode == 1
    assert "gate mtp/1 on its own address" in done.stderr and "failed: mtp accepts 0." in done.stderr
    assert "at or below the floor 0.99 (stack.acceptance_floor)" in done.stderr
    # undone as on Docker: the set is what it was before (nothing live), mtp never routed to
    assert _live_objects(standin) == set() and _upstreams(gateway) == []
    published = [
        [u["name"] for u in json.loads(c["argv"][-1])["upstreams"]]
        for c in standin.calls()
        if c["argv"][-2:-1] == ["/upstreams"]
    ]
    assert published == [["baseline/1"], []]


@pytest.mark.slow
def test_a_new_variant_that_fails_its_rollout_is_deleted_and_the_set_serves_on(
    standin: Standin, run_cli, services: dict[str, str], gateway: GatewayThread
) -> None:
    _serve_baseline_and_mtp(standin, run_cli, services)
    _scenario(standin, services, rollout={"dflash2": "fail"}, logs={"dflash2": FAILURE_LOG})
    done = run_cli(*PLACED, "up", "baseline", "dflash2", *UP, "--json")
    assert done.returncode == 1
    assert "start dflash2/1 (vllm-dflash2) failed: the rollout did not finish" in done.stderr
    assert "exceeded its progress deadline" in done.stderr
    assert "UVA is not available" in done.stderr and "hint: " in done.stderr
    assert "Traceback" not in done.stderr
    assert json.loads(done.stdout.splitlines()[-1])["outcome"] == "rolled-back"
    assert standin.commands() == [
        *OPENING,
        "logs deployment/vllm-dflash2",
        "delete deployment/vllm-dflash2",
    ]
    # mtp was neither drained nor deleted; the gateway's upstreams are as they were
    assert _live_objects(standin) == BASELINE_AND_MTP
    assert _upstreams(gateway) == ["baseline/1", "mtp/1"]


@pytest.mark.slow
def test_no_rollback_leaves_the_failed_variant_in_place_out_of_the_upstreams(
    standin: Standin, run_cli, services: dict[str, str], gateway: GatewayThread
) -> None:
    _serve_baseline_and_mtp(standin, run_cli, services)
    _scenario(standin, services, rollout={"dflash2": "fail"})
    done = run_cli(*PLACED, "up", "baseline", "mtp", "dflash2", *UP, "--no-rollback")
    assert done.returncode == 1 and "--no-rollback" in done.stderr
    assert "delete deployment/vllm-dflash2" not in standin.commands()
    assert "deployment.apps/vllm-dflash2" in _live_objects(standin)
    assert _upstreams(gateway) == ["baseline/1", "mtp/1"]


def test_overlapping_gpu_sets_are_refused_before_any_kubectl_call(standin: Standin, run_cli) -> None:
    standin.scenario()
    done = run_cli(
        "--set", "variants.baseline.gpus=0,1", "--set", "variants.mtp.gpus=1,2", "up", "baseline", "mtp", *UP
    )
    assert done.returncode == 2
    assert "GPU sets overlap" in done.stderr and "share GPU 1" in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1
    assert standin.calls() == []


def test_a_live_set_of_one_is_the_one_variant_rollout(
    standin: Standin, run_cli, gateway: GatewayThread
) -> None:
    standin.scenario(backends={"mtp": _addr(gateway)})
    done = run_cli("--set", "gateway.live=mtp", "up", *UP)
    assert done.returncode == 0, done.stderr
    assert "mtp: started on Kubernetes" in done.stdout
    commands = standin.commands()
    assert commands[0] == "get deployments"  # no live Deployment runs: today's rollout
    assert "apply --kustomize" in commands and "exec POST /upstreams" not in commands
    assert standin.serving() == "mtp"


def test_dry_run_stays_refused_on_kubernetes(standin: Standin, run_cli) -> None:
    standin.scenario()
    done = run_cli(*PLACED, "up", "baseline", "mtp", *UP, "--dry-run")
    assert done.returncode == 2 and "--dry-run works on the compose target" in done.stderr
    assert standin.calls() == []


def test_the_plan_keeps_replaces_starts_and_stops() -> None:
    """The Docker live set's plan on Deployments: members `VARIANT/1`, a changed one applied in
    place (undone by a rollback to its revision), the one-variant Deployment drained once the
    set serves, then deleted (and applied again from its overlay by an undo)."""
    stack = load_stack([REPO / "composer.toml"], env_file=None, environ={})
    cluster = ClusterLive({"baseline": "a", "mtp": "b"})
    folders = {v: Path(f"/k/{v}") for v in ("baseline", "mtp", "dflash2")}
    plan = plan_kube_live(stack, ["baseline", "dflash2"], {"baseline": "a", "dflash2": "c"}, cluster, folders)
    assert (plan.keep, plan.replace, plan.start, plan.leaving) == (
        ("baseline/1",),
        (),
        ("dflash2/1",),
        ("mtp/1",),
    )
    assert [type(op).__name__ for op in plan.ops] == [
        "Start",
        "Gate",
        "Publish",
        "Publish",
        "Drain",
        "Stop",
    ]
    assert plan.ops[0].member.run_file == "/k/dflash2" and plan.ops[0].member.container == "vllm-dflash2"
    assert plan.mode == "replace" and "1. Start: start dflash2/1 (vllm-dflash2)" in plan.describe()
    stop = plan.ops[-1]  # undone: mtp applied again from its folder and gated
    assert [type(op).__name__ for op in stop.inverse()] == ["AwaitRelease", "Start", "Gate"]
    assert stop.inverse()[1].member.run_file == "/k/mtp"

    changed = plan_kube_live(stack, ["baseline", "mtp"], {"baseline": "x", "mtp": "b"}, cluster, folders)
    assert changed.replace == ("baseline/1",) and changed.keep == ("mtp/1",) and not changed.no_op
    assert [type(op).__name__ for op in changed.ops] == [
        "Publish",
        "Drain",
        "Reapply",
        "Gate",
        "Publish",
    ]
    assert [type(op).__name__ for op in changed.ops[2].inverse()] == ["RollBack"]
    assert plan_kube_live(stack, ["baseline", "mtp"], {"baseline": "a", "mtp": "b"}, cluster).no_op
    # the gateway's Deployment, whose upstream list names the old set, is rolled last
    recorded = plan_kube_live(
        stack,
        ["baseline", "dflash2"],
        {"baseline": "a", "dflash2": "c"},
        cluster,
        folders,
        gateway_file="/k/gw.yaml",
    )
    assert type(recorded.ops[-1]).__name__ == "UpdateGateway" and recorded.ops[-1].run_file == "/k/gw.yaml"
    assert recorded.ops[-1].inverse() == () and "UpdateGateway" in recorded.describe()
    unchanged = {"baseline": "a", "mtp": "b"}
    assert plan_kube_live(stack, ["baseline", "mtp"], unchanged, cluster, gateway_file="/k/gw.yaml").ops == ()

    single = ClusterLive({}, single="baseline")
    joined = plan_kube_live(
        stack,
        ["baseline", "mtp"],
        {"baseline": "a", "mtp": "b"},
        single,
        {**folders, "single": Path("/k/one")},
    )
    assert [type(op).__name__ for op in joined.ops][-2:] == ["Drain", "Stop"] and not joined.ops[-2].live
    assert joined.ops[-1].member.container == stack.service
    assert joined.ops[-1].inverse()[1].member.run_file == "/k/one"
