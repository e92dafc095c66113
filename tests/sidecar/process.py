"""A real ``progress-control sidecar`` process for tests, and a flood of activity reports."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from tests.interceptor.test_producer import CLI


def dead_port() -> int:
    """A localhost TCP port nothing listens on (a broker that is down)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextmanager
def sidecar_process(bootstrap: str, **env: str) -> Iterator[tuple[subprocess.Popen[str], int]]:
    """``progress-control sidecar`` with ``PROGRESS_CONTROL_*`` ``env``: (process, HTTP port).
    Killed on the way out if still running; its stderr is drained so it never blocks on it."""
    full_env = {k: v for k, v in os.environ.items() if not k.startswith("PROGRESS_CONTROL_")}
    full_env |= {
        "PROGRESS_CONTROL_KAFKA__BOOTSTRAP_SERVERS": bootstrap,
        "PROGRESS_CONTROL_HTTP_PORT": "0",
        "PROGRESS_CONTROL_LOG_FORMAT": "json",
    } | {f"PROGRESS_CONTROL_{key}": value for key, value in env.items()}
    process = subprocess.Popen(
        [*CLI, "sidecar"], stderr=subprocess.PIPE, text=True, env=full_env, stdin=subprocess.DEVNULL
    )
    try:
        assert process.stderr is not None
        port = 0
        while not port:
            line = process.stderr.readline()
            assert line, "sidecar exited before serving HTTP"
            if '"serving HTTP on port' in line:
                port = int(json.loads(line)["port"])
        stderr = process.stderr
        threading.Thread(target=lambda: [None for _ in stderr], daemon=True).start()
        yield process, port
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()


@contextmanager
def report_flood(address: str | tuple[str, int]) -> Iterator[Callable[[], int]]:
    """Send valid reports (for 50 topics the sidecar does not know) as fast as a thread can,
    to a Unix socket path or a UDP ``(host, port)``; yields how many were sent so far."""
    family = socket.AF_UNIX if isinstance(address, str) else socket.AF_INET
    stop = threading.Event()
    sent = [0]

    def run() -> None:
        with socket.socket(family, socket.SOCK_DGRAM) as sock:
            sock.setblocking(False)
            while not stop.is_set():
                now_ms = int(time.time() * 1000)
                partition = {"partition": 0, "last_timestamp_ms": now_ms, "last_ack_ms": now_ms}
                report = {"v": 1, "source": "flood", "sent_ms": now_ms}
                report["partitions"] = [{"topic": f"flooded-{sent[0] % 50}", **partition}]
                try:
                    sock.sendto(json.dumps(report).encode(), address)
                    sent[0] += 1
                except OSError:  # queue full, or no socket (any more): keep trying
                    time.sleep(0.0005)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    try:
        yield lambda: sent[0]
    finally:
        stop.set()
        thread.join()
