"""A `kubectl` stand-in: records every call, refuses what the real kubectl refuses, and
replays what a real cluster prints.

No API server can run on these machines, so the rollout path is tested against this
script. It keeps the cluster's objects and the Deployment's revision history in a state
file (like a cluster's ReplicaSets), so `apply`, `rollout status`, `rollout undo`, `get`
and `annotate` agree with each other; `port-forward` really forwards a local port to
the backend of the variant the current revision runs (a process started by the test);
`exec` into the gateway Deployment runs the command locally against the test's gateway
(its control socket), as the pod would.

Honest to the real kubectl (v1.3x): every flag is checked against the verb's flags (and
the global ones), and an unknown flag fails as kubectl does (`error: unknown flag`, exit
1); resource kinds are checked per verb (`rollout` only takes Deployments, DaemonSets
and StatefulSets); `apply` takes exactly one of -f and -k, `--force-conflicts` only with
`--server-side`; `exec` needs `--` before the command; a client-side `apply` stores the
object in the `kubectl.kubernetes.io/last-applied-configuration` annotation, a
server-side one does not.

A live set's Deployments and Services (`<name>-<variant>`) are objects of their own:
`get deployments --selector` lists them, `rollout status` of one plays the scenario's
outcome for its variant, `port-forward service/<name>-<variant>` reaches that variant's
backend, `delete` removes them.

Files in $KUBECTL_STANDIN_DIR: scenario.json (what the test wants: per-variant rollout
outcome "ok" / "fail" / "timeout" / "hang" / "slow:SECONDS" / "until:PATH" (ok once PATH
exists, a timeout if it does not within --timeout), backends "host:port",
logs, gateway_socket, fail_secret, unreachable, contexts), state.json (objects,
revisions), calls.jsonl (argv, stdin, time, the caller's pid).
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import yaml

HOME = Path(os.environ["KUBECTL_STANDIN_DIR"])
STATE = HOME / "state.json"
REPO = Path(__file__).resolve().parents[2]
LAST_APPLIED = "kubectl.kubernetes.io/last-applied-configuration"

GLOBAL_VALUE_FLAGS = {
    "--namespace",
    "-n",
    "--context",
    "--kubeconfig",
    "--request-timeout",
    "--cluster",
    "--user",
}
# verb -> (flags taking a value, boolean flags), as `kubectl VERB --help` lists them (abridged)
FLAGS: dict[str, tuple[set[str], set[str]]] = {
    "apply": (
        {
            "--filename",
            "-f",
            "--kustomize",
            "-k",
            "--field-manager",
            "--dry-run",
            "--output",
            "-o",
            "--selector",
            "-l",
        },
        {
            "--server-side",
            "--force-conflicts",
            "--prune",
            "--force",
            "--overwrite",
            "--wait",
            "--recursive",
            "-R",
        },
    ),
    "get": ({"--output", "-o", "--selector", "-l"}, {"--ignore-not-found", "--watch", "-w", "--show-labels"}),
    "rollout status": ({"--timeout", "--revision"}, {"--watch", "-w"}),
    "rollout undo": ({"--to-revision", "--dry-run"}, set()),
    "logs": (
        {"--tail", "--container", "-c", "--since"},
        {"--previous", "-p", "--follow", "-f", "--timestamps"},
    ),
    "port-forward": ({"--address", "--pod-running-timeout"}, set()),
    "exec": (
        {"--container", "-c", "--pod-running-timeout"},
        {"--stdin", "-i", "--tty", "-t", "--quiet", "-q"},
    ),
    "delete": (
        {"--timeout", "--grace-period", "--selector", "-l", "--cascade", "--output", "-o"},
        {"--ignore-not-found", "--now", "--all", "--force", "--wait"},
    ),
    "annotate": (
        {"--field-manager", "--dry-run", "--output", "-o", "--resource-version"},
        {"--overwrite", "--all"},
    ),
}
KINDS = {
    "deployment": "deployment.apps",
    "deployments": "deployment.apps",
    "deploy": "deployment.apps",
    "service": "service",
    "services": "service",
    "svc": "service",
    "secret": "secret",
    "secrets": "secret",
    "pod": "pod",
    "pods": "pod",
    "po": "pod",
    "poddisruptionbudget": "poddisruptionbudget.policy",
    "pdb": "poddisruptionbudget.policy",
}
ROLLOUT_KINDS = {"deployment.apps", "daemonset.apps", "statefulset.apps"}


def load(name: str, default: object) -> dict:
    path = HOME / name
    return json.loads(path.read_text()) if path.exists() else default  # type: ignore[return-value]


def save_state(state: dict) -> None:
    tmp = STATE.with_suffix(".tmp")
    tmp.write_text(json.dumps(state))
    tmp.replace(STATE)


def fail(message: str, code: int = 1) -> None:
    print(message, file=sys.stderr)
    sys.exit(code)


def parse(argv: list[str]) -> tuple[dict[str, str], str, list[str], dict[str, str | bool], list[str]]:
    """(global flags, verb, positional args, verb flags, words after `--`), refusing unknown flags."""
    globals_: dict[str, str] = {}
    words: list[str] = []
    after: list[str] = []
    rest = list(argv)
    if "--" in rest:
        cut = rest.index("--")
        rest, after = rest[:cut], rest[cut + 1 :]
    flags: list[tuple[str, str | None]] = []
    i = 0
    while i < len(rest):
        word = rest[i]
        if word.startswith("-") and word != "-":
            name, eq, value = word.partition("=")
            if name in GLOBAL_VALUE_FLAGS:
                if not eq:
                    i += 1
                    value = rest[i]
                globals_[name] = value
            else:
                flags.append((name, value if eq else None))
                following = rest[i + 1] if i + 1 < len(rest) else None
                if not eq and following is not None and (following == "-" or not following.startswith("-")):
                    flags.append(("?", rest[i + 1]))  # maybe its value; resolved below
                    i += 1
        else:
            words.append(word)
        i += 1
    if not words:
        fail("error: You must specify the type of resource to get.")
    verb = " ".join(words[:2]) if words[0] == "rollout" else words[0]
    if verb not in FLAGS:
        fail(f'error: unknown command "{words[0]}" for "kubectl"')
    positional = words[2:] if words[0] == "rollout" else words[1:]
    with_value, boolean = FLAGS[verb]
    parsed: dict[str, str | bool] = {}
    index = 0
    while index < len(flags):
        name, value = flags[index]
        following = flags[index + 1] if index + 1 < len(flags) and flags[index + 1][0] == "?" else None
        if name in with_value:
            if value is None:
                if following is None:
                    fail(f"error: flag needs an argument: {name}")
                value = following[1]
                index += 1
            parsed[name] = value
        elif name in boolean:
            parsed[name] = True if value is None else value
            if following is not None:
                positional.append(following[1])
                index += 1
        else:
            fail(f"error: unknown flag: {name}\nSee 'kubectl {verb} --help' for usage.")
        index += 1
    return globals_, verb, positional, parsed, after


def resource(word: str, verb: str) -> tuple[str, str]:
    """(canonical kind, name) of TYPE/NAME; kubectl's error for an unknown type."""
    kind, slash, name = word.partition("/")
    if not slash:
        fail(f'error: arguments in resource/name form must have a single resource and name ("{word}")')
    canonical = KINDS.get(kind.lower())
    if canonical is None:
        fail(f'error: the server doesn\'t have a resource type "{kind}"')
    if verb.startswith("rollout") and canonical not in ROLLOUT_KINDS:
        fail(f'error: no {verb.split()[1]} viewer has been implemented for "{canonical}"')
    return canonical, name


def pod_name(deployment: str, template_labels: dict) -> str:
    return f"{deployment}-{template_labels.get('vllm-composer.config-hash', 'x')[:10]}-q7x2k"


def pods(state: dict, selector: str) -> list[dict]:
    """The pods of the Deployments whose template matches the selector: a terminating one of
    a replaced template first (as an API server may list it), then the running one."""
    wanted = dict(pair.split("=", 1) for pair in selector.split(",") if pair)
    found = []
    for key, doc in state["objects"].items():
        if not key.startswith("deployment.apps/"):
            continue
        name = key.split("/", 1)[1]
        current = doc["spec"]["template"]["metadata"]["labels"]
        old = state.get("terminating", {}).get(key)
        for template_labels, stopping in ((old, True), (current, False)):
            if template_labels is None or not wanted.items() <= template_labels.items():
                continue
            pod = {
                "metadata": {
                    "name": pod_name(name, template_labels),
                    "labels": template_labels,
                    "creationTimestamp": "2026-01-01T00:00:00Z" if stopping else "2026-01-01T00:05:00Z",
                },
                "status": {"phase": "Running", "containerStatuses": [{"name": "gateway", "ready": True}]},
            }
            if stopping:
                pod["metadata"]["deletionTimestamp"] = "2026-01-01T00:05:30Z"
            found.append(pod)
    return found


def deployment_json(name: str, revision: dict, number: int) -> str:
    """What `kubectl get deployment/NAME -o json` prints (abridged to the fields read)."""
    doc = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {
            "name": name,
            "namespace": "default",
            "generation": number,
            "annotations": {"deployment.kubernetes.io/revision": str(number)},
            "labels": revision["labels"],
        },
        "spec": {
            "replicas": 1,
            "strategy": {"type": "Recreate"},
            "template": {"metadata": {"labels": revision["labels"], "annotations": revision["annotations"]}},
        },
        "status": {"observedGeneration": number, "replicas": 1, "updatedReplicas": 1},
    }
    return json.dumps(doc, indent=4)


def read_overlay(directory: Path) -> list[dict]:
    """Every object a kustomize overlay names, as kubectl would build it."""
    if not (directory / "kustomization.yaml").is_file():
        fail(
            f"error: unable to find one of 'kustomization.yaml', 'kustomization.yml' or 'Kustomization' in directory '{directory}'"
        )
    kustomization = yaml.safe_load((directory / "kustomization.yaml").read_text())
    docs: list[dict] = []
    for item in kustomization["resources"]:
        path = (directory / item).resolve()
        docs += read_overlay(path) if path.is_dir() else [yaml.safe_load(path.read_text())]
    return docs


def forward(backend: str, port_spec: str) -> None:
    """`kubectl port-forward service/NAME :PORT`: listen on a free local port, relay to backend."""
    host, _, port = backend.rpartition(":")
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(16)
    local = listener.getsockname()[1]
    remote = port_spec.lstrip(":")
    print(
        f"Forwarding from 127.0.0.1:{local} -> {remote}\nForwarding from [::1]:{local} -> {remote}",
        flush=True,
    )

    def pump(src: socket.socket, dst: socket.socket) -> None:
        try:
            while data := src.recv(65536):
                dst.sendall(data)
        except OSError:
            pass
        finally:
            for s in (src, dst):
                with contextlib.suppress(OSError):
                    s.shutdown(socket.SHUT_RDWR)

    while True:
        client, _ = listener.accept()
        print(f"Handling connection for {local}", flush=True)
        try:
            upstream = socket.create_connection((host, int(port)), timeout=5)
        except OSError:
            client.close()
            continue
        upstream.settimeout(None)
        threading.Thread(target=pump, args=(client, upstream), daemon=True).start()
        threading.Thread(target=pump, args=(upstream, client), daemon=True).start()


def apply_document(state: dict, doc: dict, server_side: bool, verb_word: str) -> str:
    """Store one object as the API server would; a client-side apply keeps it in the annotation."""
    kind = KINDS.get(doc["kind"].lower(), doc["kind"].lower())
    key = f"{kind}/{doc['metadata']['name']}"
    existed = key in state["objects"]
    meta = dict(doc.get("metadata") or {})
    old_annotations = (state["objects"].get(key, {}).get("metadata") or {}).get("annotations") or {}
    annotations = {**old_annotations, **(meta.get("annotations") or {})}
    if not server_side:
        annotations[LAST_APPLIED] = json.dumps(doc, separators=(",", ":"))
    meta["annotations"] = annotations
    if kind == "deployment.apps" and existed:
        old = state["objects"][key]["spec"]["template"]["metadata"]["labels"]
        if old != doc["spec"]["template"]["metadata"]["labels"]:
            state.setdefault("terminating", {})[key] = old  # its pod is still stopping
    state["objects"][key] = {**doc, "metadata": meta}
    return f"{key} {'serverside-applied' if server_side else ('configured' if existed else 'created')}"


def template_variant(state: dict, key: str) -> str | None:
    """The variant label of a stored Deployment's pod template (None: not a variant's)."""
    doc = state["objects"].get(key) or {}
    return doc["spec"]["template"]["metadata"].get("labels", {}).get("vllm-composer.variant") if doc else None


def wait_rollout(deployment: str, outcome: str, timeout: float) -> None:
    """`kubectl rollout status` of a Deployment whose rollout ends as the scenario says."""
    print(
        f'Waiting for deployment "{deployment}" rollout to finish: 0 of 1 updated replicas are available...',
        flush=True,
    )
    if outcome.startswith("slow:"):
        time.sleep(float(outcome.split(":")[1]))
        outcome = "ok"
    if outcome.startswith("until:"):
        go, deadline = Path(outcome.split(":", 1)[1]), time.monotonic() + timeout
        while not go.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        outcome = "ok" if go.exists() else "timeout"
    if outcome == "ok":
        print(f'deployment "{deployment}" successfully rolled out')
        return
    if outcome == "hang":
        time.sleep(timeout)
        outcome = "timeout"
    if outcome == "timeout":
        time.sleep(min(timeout, 10))
        fail("error: timed out waiting for the condition")
    fail(f'error: deployment "{deployment}" exceeded its progress deadline')


def _flag_value(argv: list[str], flag: str) -> str | None:
    for index, word in enumerate(argv):
        if word == flag and index + 1 < len(argv):
            return argv[index + 1]
        if word.startswith(f"{flag}="):
            return word.partition("=")[2]
    return None


def main(argv: list[str]) -> None:
    scenario = load("scenario.json", {})
    state = load("state.json", {"history": [], "objects": {}})
    state.setdefault("objects", {})
    reads_stdin = "-" in argv and any(a in ("--filename", "-f") for a in argv)
    stdin = sys.stdin.read() if reads_stdin else ""
    with (HOME / "calls.jsonl").open("a") as log:
        record = {
            "argv": argv,
            "stdin": stdin,
            "t": time.time(),
            "pid": os.getppid(),
            "namespace": _flag_value(argv, "--namespace"),
            "context": _flag_value(argv, "--context"),
        }
        log.write(json.dumps(record) + "\n")
    globals_, verb, positional, flags, after = parse(argv)
    context = globals_.get("--context")
    if context is not None and context not in scenario.get("contexts", ["standin", context]):
        fail(f'error: context "{context}" does not exist')
    if scenario.get("unreachable"):
        fail(
            "The connection to the server 127.0.0.1:6443 was refused - did you specify the right host or port?"
        )
    name = scenario.get("name", "vllm")
    revision = state["history"][-1] if state["history"] else None

    if verb == "get" and positional[:1] == ["pods"]:
        selector = str(flags.get("--selector", flags.get("-l", "")))
        print(json.dumps({"apiVersion": "v1", "kind": "List", "items": pods(state, selector)}, indent=4))
        return
    if verb == "get" and positional[:1] in (["deployments"], ["deployment"], ["deploy"]):
        selector = str(flags.get("--selector", flags.get("-l", "")))
        wanted = dict(pair.split("=", 1) for pair in selector.split(",") if pair)
        items = [
            doc
            for key, doc in state["objects"].items()
            if key.startswith("deployment.apps/")
            and wanted.items() <= ((doc.get("metadata") or {}).get("labels") or {}).items()
        ]
        print(json.dumps({"apiVersion": "v1", "kind": "List", "items": items}, indent=4))
        return
    if verb == "get":
        kind, obj = resource(positional[0], verb)
        key = f"{kind}/{obj}"
        if kind == "deployment.apps" and obj == name and revision is not None:
            print(deployment_json(name, revision, len(state["history"])))
            return
        if key not in state["objects"]:
            if flags.get("--ignore-not-found"):
                return
            fail(f'Error from server (NotFound): {kind.split(".")[0]}s "{obj}" not found')
        print(key if flags.get("--output") == "name" else json.dumps(state["objects"][key], indent=4))
        return
    if verb == "apply":
        has_f, has_k = "--filename" in flags or "-f" in flags, "--kustomize" in flags or "-k" in flags
        if has_f == has_k:
            fail(
                "error: must specify one of -f and -k"
                if not has_f
                else "error: only one of -f or -k can be specified"
            )
        server_side = bool(flags.get("--server-side"))
        if flags.get("--force-conflicts") and not server_side:
            fail("error: --force-conflicts only works with --server-side")
        if has_f:
            source = str(flags.get("--filename", flags.get("-f")))
            if source != "-":
                if not Path(source).is_file():
                    fail(f'error: the path "{source}" does not exist')
                doc = yaml.safe_load(Path(source).read_text())
                print(apply_document(state, doc, server_side, "apply"))
                save_state(state)
                return
            doc = json.loads(stdin)
            if scenario.get("fail_secret"):
                # As kubectl does when the server refuses a patch: the object is echoed back.
                fail(
                    "Error from server (Forbidden): error when applying patch:\n"
                    f'{json.dumps(doc)}\nto:\nResource: "/v1, Resource=secrets"\n'
                    f'Name: "{doc["metadata"]["name"]}", Namespace: "default"\n'
                    f'for: "STDIN": {json.dumps(doc)}: secrets is forbidden: exceeded quota'
                )
            print(apply_document(state, doc, server_side, "apply"))
            save_state(state)
            return
        docs = read_overlay(Path(str(flags.get("--kustomize", flags.get("-k")))))
        if scenario.get("fail_apply"):
            fail(
                'Error from server (Forbidden): error when creating "deployment.yaml": admission webhook denied the request'
            )
        lines = [apply_document(state, doc, server_side, "apply") for doc in docs]
        deployment = next(
            (d for d in docs if d["kind"] == "Deployment" and d["metadata"]["name"] == name), None
        )
        if deployment is not None:  # the one-variant Deployment: its revision history
            meta = deployment["spec"]["template"]["metadata"]
            new = {"labels": meta["labels"], "annotations": meta.get("annotations", {})}
            if revision is None or revision["labels"] != new["labels"]:
                state["history"].append(new)
        save_state(state)
        print("\n".join(lines))
        return
    if verb == "rollout status":
        _, rolled = resource(positional[0], verb)
        timeout = float(str(flags["--timeout"]).rstrip("s"))
        if rolled != name:
            if f"deployment.apps/{rolled}" not in state["objects"]:
                fail(f'Error from server (NotFound): deployments.apps "{rolled}" not found')
            variant = template_variant(state, f"deployment.apps/{rolled}")
            if variant is None:
                # the gateway: its old pod may still be terminating (preStop, grace period)
                print(f'deployment "{rolled}" successfully rolled out')
                return
            wait_rollout(rolled, scenario.get("rollout", {}).get(variant, "ok"), timeout)
            return
        variant = revision["labels"]["vllm-composer.variant"] if revision else ""
        wait_rollout(name, scenario.get("rollout", {}).get(variant, "ok"), timeout)
        return
    if verb == "rollout undo":
        _, undone = resource(positional[0], verb)
        if undone != name:
            if f"deployment.apps/{undone}" not in state["objects"]:
                fail(f'Error from server (NotFound): deployments.apps "{undone}" not found')
            print(f"deployment.apps/{undone} rolled back")
            return
        if len(state["history"]) < 2:
            fail(f'error: no rollout history found for deployment "{name}"')
        state["history"].append(state["history"][-2])
        save_state(state)
        print(f"deployment.apps/{name} rolled back")
        return
    if verb == "annotate":
        kind, obj = resource(positional[0], verb)
        key = f"{kind}/{obj}"
        if key not in state["objects"]:
            fail(f'Error from server (NotFound): {kind}s "{obj}" not found')
        annotations = state["objects"][key]["metadata"].setdefault("annotations", {})
        for change in positional[1:]:
            if change.endswith("-"):
                annotations.pop(change[:-1], None)
            else:
                k, _, v = change.partition("=")
                if k in annotations and not flags.get("--overwrite"):
                    fail(
                        f"error: --overwrite is false but found the following declared annotation(s): '{k}' already has a value"
                    )
                annotations[k] = v
        save_state(state)
        print(f"{key} annotated")
        return
    if verb == "delete":
        for word in positional:
            kind, obj = resource(word, verb)
            if state["objects"].pop(f"{kind}/{obj}", None) is None and not flags.get("--ignore-not-found"):
                fail(f'Error from server (NotFound): {kind.split(".")[0]}s "{obj}" not found')
            print(f'{kind.split(".")[0]} "{obj}" deleted')
        save_state(state)
        return
    if verb == "logs":
        _, logged = resource(positional[0], verb)
        variant = revision["labels"]["vllm-composer.variant"] if revision else ""
        if logged != name:
            variant = template_variant(state, f"deployment.apps/{logged}") or ""
        print(scenario.get("logs", {}).get(variant, f"INFO ... {variant} log line"))
        return
    if verb == "exec":
        kind, obj = resource(positional[0], verb)
        if not after:
            fail("error: you must specify at least one command for the container")
        if kind == "pod":
            owner = next(
                (
                    key
                    for key, doc in state["objects"].items()
                    if key.startswith("deployment.apps/")
                    and pod_name(key.split("/", 1)[1], doc["spec"]["template"]["metadata"]["labels"]) == obj
                ),
                None,
            )
            if owner is None:
                fail(f'Error from server (NotFound): pods "{obj}" not found')
            kind, obj = owner.split("/", 1)
            with (HOME / "exec-pods.log").open("a") as pod_log:
                pod_log.write(positional[0] + "\n")
        if f"{kind}/{obj}" not in state["objects"]:
            fail(f'Error from server (NotFound): {kind.split(".")[0]}s "{obj}" not found')
        container = flags.get("--container", flags.get("-c"))
        template = state["objects"][f"{kind}/{obj}"]["spec"]["template"]["spec"]
        if container not in [c["name"] for c in template["containers"]]:
            fail(f'error: unable to upgrade connection: container not found ("{container}")')
        if after[:3] != ["python3", "-m", "composer.gateway.ctl"] or "gateway_socket" not in scenario:
            fail(f"error: the stand-in runs only the gateway's control tool, not {after[:3]}")
        env = {**os.environ, "PYTHONPATH": str(REPO), "GATEWAY_CONTROL_SOCKET": scenario["gateway_socket"]}
        done = subprocess.run(
            [sys.executable, *after[1:]], capture_output=True, text=True, env=env, check=False
        )
        sys.stdout.write(done.stdout)
        sys.stderr.write(done.stderr)
        if done.returncode:
            fail(f"command terminated with exit code {done.returncode}", done.returncode)
        return
    if verb == "port-forward":
        kind, obj = resource(positional[0], verb)
        variant = revision["labels"]["vllm-composer.variant"] if revision else ""
        if obj != name:  # a live variant's Service reaches that variant's backend
            selector = (state["objects"].get(f"service/{obj}", {}).get("spec") or {}).get("selector") or {}
            variant = selector.get("vllm-composer.variant", "")
        backend = scenario.get("backends", {}).get(variant)
        if backend is None or (obj != name and f"service/{obj}" not in state["objects"]):
            fail(
                f"error: unable to forward port because pod is not running. Current status=Pending ({variant})"
            )
        forward(backend, positional[1])
        return
    fail(f"error: the stand-in does not know `kubectl {' '.join(argv)}`")


if __name__ == "__main__":
    main(sys.argv[1:])
