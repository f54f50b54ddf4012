"""A small live load for the demo: streaming clients through the shared port until
SIGINT or SIGTERM, then one line with what the clients saw.

Usage: python demo_load.py URL [CLIENTS]   (the key comes from VLLM_API_KEY)
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import time

import httpx

stop = threading.Event()
lock = threading.Lock()
counts = {"requests": 0, "failed": 0, "cut": 0}
longest = [0.0]


def client(url: str, key: str) -> None:
    body = {"model": os.environ.get("SERVED_MODEL_NAME", "claude-opus-5"), "max_tokens": 32, "stream": True}
    body["messages"] = [{"role": "user", "content": "Say something about the weather."}]
    with httpx.Client(timeout=httpx.Timeout(600.0, connect=5.0), trust_env=False) as http:
        while not stop.is_set():
            began = time.monotonic()
            first, done, failed = None, False, False
            try:
                with http.stream(
                    "POST",
                    url + "/v1/chat/completions",
                    json=body,
                    headers={"Authorization": f"Bearer {key}"},
                ) as response:
                    failed = response.status_code != 200
                    for line in response.iter_lines():
                        first = first or time.monotonic() - began
                        done = done or line == "data: [DONE]"
            except httpx.HTTPError:
                failed = True
            with lock:
                counts["requests"] += 1
                counts["failed"] += failed
                counts["cut"] += not failed and not done
                longest[0] = max(longest[0], first or 0.0)


def main() -> int:
    url, clients = sys.argv[1].rstrip("/"), int(sys.argv[2]) if len(sys.argv) > 2 else 4
    key = os.environ["VLLM_API_KEY"]
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    threads = [threading.Thread(target=client, args=(url, key), daemon=True) for _ in range(clients)]
    for thread in threads:
        thread.start()
    while not stop.wait(0.2):
        pass
    for thread in threads:
        thread.join(timeout=60)
    print(
        f"load: {clients} streaming clients, {counts['requests']} requests, {counts['failed']} failed, "
        f"{counts['cut']} cut, longest wait for a first byte {longest[0]:.1f}s"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
