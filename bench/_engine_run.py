"""Run one engine of the engines benchmark as a child process and measure it the same way for
every engine: seconds from the process's start until its consumer group's committed offsets
reach the end offset of every input partition, and the process's peak RSS (``ru_maxrss`` from
``os.wait4`` once it has been stopped with SIGTERM)."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from confluent_kafka import Consumer, TopicPartition

__all__ = ["Measured", "run_engine"]

REPO = Path(__file__).resolve().parent.parent
_POLL_S = 0.1
_STOP_TIMEOUT_S = 60.0


@dataclass(frozen=True)
class Measured:
    seconds: float
    peak_rss_mib: float


def _committed(watcher: Consumer, source: str, partitions: int) -> list[int]:
    topic_partitions = [TopicPartition(source, p) for p in range(partitions)]
    return [tp.offset for tp in watcher.committed(topic_partitions, timeout=10)]


def _stop(process: subprocess.Popen[bytes]) -> tuple[int, float]:
    """SIGTERM, then SIGKILL after a minute; the exit code and peak RSS in MiB."""
    if process.returncode is None:
        process.send_signal(signal.SIGTERM)
    deadline = time.monotonic() + _STOP_TIMEOUT_S
    while True:
        pid, status, usage = os.wait4(process.pid, os.WNOHANG)
        if pid:
            break
        if time.monotonic() > deadline:
            process.kill()
            pid, status, usage = os.wait4(process.pid, 0)
            break
        time.sleep(0.05)
    process.returncode = os.waitstatus_to_exitcode(status)  # Popen must not wait again
    return process.returncode, usage.ru_maxrss / 1024  # KiB on Linux


def run_engine(
    command: Sequence[str],
    *,
    bootstrap_servers: str,
    group: str,
    source: str,
    end_offsets: list[int],
    log_path: Path,
    timeout_s: float,
) -> Measured:
    """Start ``command``, wait until ``group`` has committed ``end_offsets`` on ``source``,
    stop it; raises if it exits early or takes longer than ``timeout_s``."""
    watcher = Consumer(
        {"bootstrap.servers": bootstrap_servers, "group.id": group, "enable.auto.commit": False}
    )
    with log_path.open("wb") as log:
        started = time.perf_counter()
        process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, cwd=REPO)
    try:
        while True:
            pid, status, _ = os.wait4(process.pid, os.WNOHANG)
            if pid:
                process.returncode = os.waitstatus_to_exitcode(status)
                tail = log_path.read_text(errors="replace")[-1500:]
                raise RuntimeError(f"exited ({process.returncode}) before the end:\n{tail}")
            offsets = _committed(watcher, source, len(end_offsets))
            elapsed = time.perf_counter() - started
            if all(o >= end for o, end in zip(offsets, end_offsets, strict=True)):
                break
            if elapsed > timeout_s:
                raise RuntimeError(f"committed {offsets} of {end_offsets} after {timeout_s:.0f} s")
            time.sleep(_POLL_S)
    finally:
        watcher.close()
        code, peak_rss_mib = _stop(process)
    if code not in (0, -signal.SIGTERM, 128 + signal.SIGTERM):  # the JVM: 143
        tail = log_path.read_text(errors="replace")[-1500:]
        raise RuntimeError(f"exit code {code} after SIGTERM:\n{tail}")
    return Measured(elapsed, peak_rss_mib)
