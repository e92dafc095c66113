"""One embedded broker for every pytest-xdist worker of a run, instead of one each: started by
the first worker that needs it (the others wait on a lock, then read its address), stopped by
the controller when the run ends. Tests name their topics, groups and application ids uniquely,
so they share a broker as they share a developer's; what a broker of its own is needed for
(restarts, outages) starts its own.

The controller makes the run's directory (:func:`prepare`) and says where in
``PROGRESS_CONTROL_TEST_SHARED_BROKER_DIR``, which its workers inherit.
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
from pathlib import Path

from streams_runtime.testing.driver import MEMORY_DIR

__all__ = ["ENV", "bootstrap_servers", "prepare", "stop"]

ENV = "PROGRESS_CONTROL_TEST_SHARED_BROKER_DIR"
_READY = "Kafka broker ready: bootstrap.servers="
_START_TIMEOUT_S = 240.0
_STOP_TIMEOUT_S = 30.0


def prepare() -> Path:
    """The run's directory, named in :data:`ENV` for the workers the controller starts next."""
    run_dir = Path(tempfile.mkdtemp(prefix="progress-control-test-broker-"))
    os.environ[ENV] = str(run_dir)
    return run_dir


def bootstrap_servers(run_dir: Path) -> str:
    """The shared broker's address, starting it if no worker did yet."""
    with (run_dir / "lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes, or the worker dies
        address = run_dir / "address"
        if address.exists():
            return address.read_text()
        output = run_dir / "broker.out"
        with output.open("w") as out:
            # Its data in memory where the machine has room (as the test drivers' stores): on
            # this kind of machine, creating a partition on disk costs three times the CPU (its
            # files synced), and the suite creates thousands.
            env = {**os.environ, "TMPDIR": MEMORY_DIR} if MEMORY_DIR else None
            process = subprocess.Popen(
                [sys.executable, "-m", "progress_control.cli", "broker"],
                env=env,
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,  # outlives this worker; the controller stops it
            )
        (run_dir / "pid").write_text(str(process.pid))
        deadline = time.monotonic() + _START_TIMEOUT_S
        while True:
            for line in output.read_text().splitlines():
                if line.startswith(_READY):
                    address.write_text(line[len(_READY) :].strip())
                    return address.read_text()
            if process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(
                    f"the shared test broker did not start (exit code {process.poll()}):\n"
                    + output.read_text()[-3000:]
                )
            time.sleep(0.2)


def stop(run_dir: Path) -> None:
    """Stop the shared broker (if a worker started one) and remove the run's directory."""
    pid_file = run_dir / "pid"
    if pid_file.exists():
        pid = int(pid_file.read_text())
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM)
            deadline = time.monotonic() + _STOP_TIMEOUT_S
            while time.monotonic() < deadline:
                os.kill(pid, 0)  # ProcessLookupError once it is gone
                with contextlib.suppress(ChildProcessError):
                    os.waitpid(pid, os.WNOHANG)
                time.sleep(0.2)
            os.killpg(pid, signal.SIGKILL)
    shutil.rmtree(run_dir, ignore_errors=True)
