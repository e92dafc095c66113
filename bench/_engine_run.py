"""Run one engine of the engines benchmark as a child process and measure it the same way for
every engine: seconds from the process's start until its consumer group's committed offsets
reach the end offset of every input partition, and the process's peak RSS (``VmHWM`` of
``/proc/PID/status`` just before it is stopped with SIGTERM).

Where the engine's log says when it processed its first and its last record (the runtime's
``first record processed`` and first ``input drained`` JSON lines, the plain loop's lines of the
same shape), also its fixed cost: seconds from the process's start to the first record
processed, and from the last record processed to the moment the committed offsets were seen at
the end (to within the watcher's poll, 50 ms).

The steady rate, for every engine: records committed per second between the first commit the
watcher sees and the last (the committed offsets' advance over that time), so neither start-up
nor the final commit counts. Coarse for short runs: commits come once per commit interval.

Not ``ru_maxrss`` from ``os.wait4``: Linux carries the high-water mark of the forked copy of this
benchmark process (its pre-loaded input included) across ``exec``, so a small engine would be
reported at least as large as the benchmark itself."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from confluent_kafka import Consumer, TopicPartition

__all__ = ["Measured", "run_engine"]

REPO = Path(__file__).resolve().parent.parent
_POLL_S = 0.05
_STOP_TIMEOUT_S = 60.0


@dataclass(frozen=True)
class Measured:
    seconds: float
    peak_rss_mib: float
    first_record_s: float | None = None
    """Process start -> first record processed (None: the engine does not say)."""
    commit_after_last_s: float | None = None
    """Last record processed -> its offsets seen committed (None: the engine does not say)."""
    steady_rate: float | None = None
    """Records/s committed between the first commit seen and the last (None: one commit)."""


def record_times(log: str) -> tuple[float | None, float | None]:
    """Wall-clock times the engine processed its first and its last record, from its JSON log
    lines: the first line with ``since_start_s`` (stamped when the first record was processed)
    and the first with ``since_last_record_s`` (stamped that long after the last one)."""
    first = last = None
    for line in log.splitlines():
        if not line.startswith("{"):
            continue
        try:
            entry = json.loads(line)
            at = datetime.fromisoformat(entry["timestamp"]).timestamp()
        except (ValueError, TypeError, KeyError):
            continue
        if first is None and "since_start_s" in entry:
            first = at
        if last is None and "since_last_record_s" in entry:
            last = at - float(entry["since_last_record_s"])
    return first, last


def _committed(watcher: Consumer, source: str, partitions: int) -> list[int]:
    topic_partitions = [TopicPartition(source, p) for p in range(partitions)]
    return [tp.offset for tp in watcher.committed(topic_partitions, timeout=10)]


def _peak_rss_mib(pid: int) -> float:
    """The running process's peak resident set size since its ``exec``, in MiB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024  # kB
    raise RuntimeError(f"no VmHWM in /proc/{pid}/status")


def _stop(process: subprocess.Popen[bytes]) -> int:
    """SIGTERM, then SIGKILL after a minute; the exit code (of a process reaped already: as
    it was)."""
    if process.returncode is not None:
        return process.returncode
    process.send_signal(signal.SIGTERM)
    deadline = time.monotonic() + _STOP_TIMEOUT_S
    while True:
        pid, status, _ = os.wait4(process.pid, os.WNOHANG)
        if pid:
            break
        if time.monotonic() > deadline:
            process.kill()
            pid, status, _ = os.wait4(process.pid, 0)
            break
        time.sleep(0.05)
    process.returncode = os.waitstatus_to_exitcode(status)  # Popen must not wait again
    return process.returncode


def run_engine(
    command: Sequence[str],
    *,
    bootstrap_servers: str,
    group: str,
    source: str,
    end_offsets: list[int],
    log_path: Path,
    timeout_s: float,
    output_ready: Callable[[], bool] | None = None,
) -> Measured:
    """Start ``command``, wait until ``group`` has committed ``end_offsets`` on ``source`` (and
    then, for a topology of several sub-topologies, until ``output_ready()``: the source's
    offsets say nothing of the stages after a repartition), stop it; raises if it exits early
    or takes longer than ``timeout_s``."""
    watcher = Consumer(
        {"bootstrap.servers": bootstrap_servers, "group.id": group, "enable.auto.commit": False}
    )
    with log_path.open("wb") as log:
        started = time.perf_counter()
        started_wall = time.time()
        process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, cwd=REPO)
    first_commit: tuple[float, int] | None = None  # (elapsed, records committed)
    try:
        while True:
            pid, status, _ = os.wait4(process.pid, os.WNOHANG)
            if pid:
                process.returncode = os.waitstatus_to_exitcode(status)
                tail = log_path.read_text(errors="replace")[-1500:]
                raise RuntimeError(f"exited ({process.returncode}) before the end:\n{tail}")
            offsets = _committed(watcher, source, len(end_offsets))
            elapsed = time.perf_counter() - started
            committed = sum(max(o, 0) for o in offsets)  # no commit yet: -1001
            if first_commit is None and committed:
                first_commit = (elapsed, committed)
            if all(o >= end for o, end in zip(offsets, end_offsets, strict=True)) and (
                output_ready is None or output_ready()
            ):
                committed_wall = time.time()
                break
            if elapsed > timeout_s:
                raise RuntimeError(f"committed {offsets} of {end_offsets} after {timeout_s:.0f} s")
            time.sleep(_POLL_S)
        peak_rss_mib = _peak_rss_mib(process.pid)
    finally:
        watcher.close()
        code = _stop(process)
    if code not in (0, -signal.SIGTERM, 128 + signal.SIGTERM):  # the JVM: 143
        tail = log_path.read_text(errors="replace")[-1500:]
        raise RuntimeError(f"exit code {code} after SIGTERM:\n{tail}")
    first, last = record_times(log_path.read_text(errors="replace"))
    steady = None
    if first_commit is not None and elapsed > first_commit[0]:
        steady = (committed - first_commit[1]) / (elapsed - first_commit[0])
    return Measured(
        elapsed,
        peak_rss_mib,
        first_record_s=None if first is None else first - started_wall,
        commit_after_last_s=None if last is None else committed_wall - last,
        steady_rate=steady,
    )
