"""One embedded broker and one schema registry for every pytest-xdist worker of a run, instead of
one each: each started by the first worker that needs it (the others wait on a lock, then read
its address), stopped by the controller when the run ends. Tests name their topics, groups,
application ids and subjects uniquely, so they share these as they share a developer's; what a
broker of its own is needed for (restarts, outages) starts its own.

The controller makes the run's directory (:func:`prepare`) and says where in
``PROGRESS_CONTROL_TEST_SHARED_DIR``, which its workers inherit.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from streams_runtime.testing.driver import MEMORY_DIR

__all__ = ["BROKER", "ENV", "SCHEMA_REGISTRY", "SharedService", "address", "prepare", "stop"]

ENV = "PROGRESS_CONTROL_TEST_SHARED_DIR"
_START_TIMEOUT_S = 240.0
_STOP_TIMEOUT_S = 30.0


@dataclass(frozen=True, slots=True)
class SharedService:
    """A ``progress-control`` command that serves until stopped and prints its address."""

    name: str
    """Its subdirectory of the run's directory."""
    command: str
    ready: str
    """The start of the line that gives its address (the rest of the line)."""
    in_memory: bool
    """Its data on a roomy tmpfs where there is one."""


# On this kind of machine, creating a partition on disk costs three times the CPU (its files
# synced), and the suite creates thousands: the broker's data in memory where there is room.
BROKER = SharedService("broker", "broker", "Kafka broker ready: bootstrap.servers=", True)
SCHEMA_REGISTRY = SharedService(
    "schema-registry", "schema-registry", "Schema registry ready: url=", False
)


def prepare() -> Path:
    """The run's directory, named in :data:`ENV` for the workers the controller starts next."""
    run_dir = Path(tempfile.mkdtemp(prefix="progress-control-test-services-"))
    os.environ[ENV] = str(run_dir)
    return run_dir


def address(run_dir: Path, service: SharedService) -> str:
    """The shared ``service``'s address, starting it if no worker did yet."""
    directory = run_dir / service.name
    directory.mkdir(exist_ok=True)
    with (directory / "lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes, or the worker dies
        known = directory / "address"
        if known.exists():
            return known.read_text()
        output = directory / "output"
        with output.open("w") as out:
            env = {**os.environ, "TMPDIR": MEMORY_DIR} if service.in_memory and MEMORY_DIR else None
            process = subprocess.Popen(
                [sys.executable, "-m", "progress_control_apps.cli", service.command],
                env=env,
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,  # outlives this worker; the controller stops it
            )
        (directory / "pid").write_text(str(process.pid))
        deadline = time.monotonic() + _START_TIMEOUT_S
        while True:
            for line in output.read_text().splitlines():
                if line.startswith(service.ready):
                    known.write_text(line[len(service.ready) :].strip())
                    return known.read_text()
            if process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(
                    f"the shared {service.name} did not start (exit code {process.poll()}):\n"
                    + output.read_text()[-3000:]
                )
            time.sleep(0.2)


def stop(run_dir: Path) -> None:
    """Stop the shared services the workers started and remove the run's directory."""
    pids = [int(pid_file.read_text()) for pid_file in run_dir.glob("*/pid")]
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + _STOP_TIMEOUT_S
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            while time.monotonic() < deadline:
                os.kill(pid, 0)  # ProcessLookupError once it is gone
                with contextlib.suppress(ChildProcessError):
                    os.waitpid(pid, os.WNOHANG)
                time.sleep(0.2)
            os.killpg(pid, signal.SIGKILL)
    shutil.rmtree(run_dir, ignore_errors=True)
