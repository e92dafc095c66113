"""What the dev tools' JVMs (the embedded broker, the schema registry) share: which Java a launcher
is, a child JVM that dies with our process, and stopping one's process group."""

from __future__ import annotations

import contextlib
import ctypes
import logging
import os
import re
import signal
import subprocess
from pathlib import Path

__all__ = ["die_with_parent", "java_version", "stop_process_group"]

logger = logging.getLogger(__name__)


def java_version(java: Path) -> tuple[int, str]:
    """The major version of the ``java`` launcher (0 when it cannot tell) and the first line its
    ``-version`` prints, for messages."""
    try:
        result = subprocess.run(
            [str(java), "-version"], capture_output=True, text=True, check=False, timeout=60
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return 0, str(exc)
    output = result.stderr + result.stdout
    match = re.search(r'version "(\d+)(?:\.(\d+))?', output)
    major = int(match.group(1)) if match else 0
    if major == 1 and match and match.group(2):  # "1.8.0" style
        major = int(match.group(2))
    return major, next(iter(output.strip().splitlines()), "")


def die_with_parent() -> None:
    """Runs in the child before exec (``preexec_fn``): ask Linux to SIGTERM the JVM if our process
    dies."""
    with contextlib.suppress(Exception):
        pr_set_pdeathsig = 1
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(pr_set_pdeathsig, signal.SIGTERM)


def stop_process_group(process: subprocess.Popen[bytes], timeout_s: float, name: str) -> None:
    """SIGTERM the process group ``process`` leads (started with ``start_new_session``), then
    SIGKILL it if it has not exited within ``timeout_s``; ``name`` is for the warning."""
    if process.poll() is not None:
        return
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGTERM)
    try:
        process.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        logger.warning(
            "%(name)s did not stop within %(timeout_s).0fs; killing it",
            {"name": name, "timeout_s": timeout_s, "pid": process.pid},
        )
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        process.wait()
