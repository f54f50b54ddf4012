"""A `kubectl` stand-in: records every call and replays what a real cluster prints.

No API server can run on these machines, so the rollout path is tested against this
script. It keeps the Deployment's revision history in a state file (like a cluster's
ReplicaSets), so `apply -k`, `rollout status`, `rollout undo` and `get` agree with each
other, and `port-forward` really forwards a local port to the backend of the variant
that the current revision runs (a simulator process started by the test).

Files in $KUBECTL_STANDIN_DIR: scenario.json (what the test wants: per-variant rollout
outcome "ok" / "fail" / "timeout", backends "host:port", logs), state.json (revisions),
calls.jsonl (argv, and stdin of `apply --filename -`).
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import sys
import threading
import time
from pathlib import Path

import yaml

HOME = Path(os.environ["KUBECTL_STANDIN_DIR"])
STATE = HOME / "state.json"


def load(name: str, default: object) -> dict:
    path = HOME / name
    return json.loads(path.read_text()) if path.exists() else default  # type: ignore[return-value]


def save_state(state: dict) -> None:
    STATE.write_text(json.dumps(state))


def fail(message: str, code: int = 1) -> None:
    print(message, file=sys.stderr)
    sys.exit(code)


def current(state: dict) -> dict | None:
    return state["history"][-1] if state["history"] else None


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


def read_overlay(directory: Path) -> tuple[dict, list[str]]:
    """The Deployment of a kustomize overlay and every object it names, as kubectl would."""
    kustomization = yaml.safe_load((directory / "kustomization.yaml").read_text())
    deployment, objects = None, []
    for resource in kustomization["resources"]:
        path = (directory / resource).resolve()
        if path.is_dir():
            _, more = read_overlay(path)
            objects += more
            continue
        doc = yaml.safe_load(path.read_text())
        objects.append(
            f"{doc['kind'].lower()}{'.apps' if doc['kind'] == 'Deployment' else ''}/{doc['metadata']['name']}"
        )
        if doc["kind"] == "Deployment":
            deployment = doc
    return deployment, objects  # type: ignore[return-value]


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


def main(argv: list[str]) -> None:
    scenario = load("scenario.json", {})
    state = load("state.json", {"history": []})
    args = list(argv)
    namespace = None
    if args[:1] == ["--namespace"]:
        namespace, args = args[1], args[2:]
    stdin = sys.stdin.read() if args[:3] == ["apply", "--filename", "-"] else ""
    with (HOME / "calls.jsonl").open("a") as log:
        log.write(json.dumps({"argv": argv, "namespace": namespace, "stdin": stdin}) + "\n")
    name = scenario.get("name", "vllm")
    revision = current(state)

    if args[:2] == ["get", f"deployment/{name}"]:
        if revision is not None:
            print(deployment_json(name, revision, len(state["history"])))
        return
    if args[:3] == ["apply", "--filename", "-"]:
        doc = json.loads(stdin)
        existed = state.get("secret") is not None
        state["secret"] = sorted(doc.get("stringData", {}))
        save_state(state)
        print(f"secret/{doc['metadata']['name']} {'configured' if existed else 'created'}")
        return
    if args[:2] == ["apply", "--kustomize"]:
        deployment, objects = read_overlay(Path(args[2]))
        meta = deployment["spec"]["template"]["metadata"]
        new = {"labels": meta["labels"], "annotations": meta["annotations"]}
        first = revision is None
        same = revision is not None and revision["labels"] == new["labels"]
        if not same:
            state["history"].append(new)
            save_state(state)
        for obj in objects:
            kind = obj.split("/")[0]
            verb = (
                "created"
                if first
                else "configured"
                if kind.startswith("deployment") and not same
                else "unchanged"
            )
            print(f"{obj} {verb}")
        return
    if args[:2] == ["rollout", "status"]:
        timeout = float(next(a for a in args if a.startswith("--timeout=")).split("=")[1].rstrip("s"))
        variant = revision["labels"]["vllm-composer.variant"] if revision else ""
        outcome = scenario.get("rollout", {}).get(variant, "ok")
        print(
            f'Waiting for deployment "{name}" rollout to finish: 0 of 1 updated replicas are available...',
            flush=True,
        )
        if outcome == "ok":
            print(f'deployment "{name}" successfully rolled out')
            return
        if outcome == "timeout":
            time.sleep(min(timeout, 10))
            fail("error: timed out waiting for the condition")
        fail(f'error: deployment "{name}" exceeded its progress deadline')
    if args[:2] == ["rollout", "undo"]:
        if len(state["history"]) < 2:
            fail(f'error: no rollout history found for deployment "{name}"')
        state["history"].append(state["history"][-2])
        save_state(state)
        print(f"deployment.apps/{name} rolled back")
        return
    if args[:1] == ["logs"]:
        variant = revision["labels"]["vllm-composer.variant"] if revision else ""
        print(scenario.get("logs", {}).get(variant, f"INFO ... {variant} log line"))
        return
    if args[:2] == ["port-forward", f"service/{name}"]:
        variant = revision["labels"]["vllm-composer.variant"] if revision else ""
        backend = scenario.get("backends", {}).get(variant)
        if backend is None:
            fail(
                f"error: unable to forward port because pod is not running. Current status=Pending ({variant})"
            )
        forward(backend, args[2])
        return
    fail(f"error: the stand-in does not know `kubectl {' '.join(argv)}`")


if __name__ == "__main__":
    main(sys.argv[1:])
