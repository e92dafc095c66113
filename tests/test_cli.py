"""The ``progress-control`` command line, run as a user runs it."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from pathlib import Path

from confluent_kafka.admin import AdminClient

from tests.helpers import wait_for

CLI = [sys.executable, "-m", "progress_control.cli"]


def test_demo_rejects_bad_options_naming_them() -> None:
    # The demo itself runs in tests/test_pipeline.py; here only its command line.
    for args, message in [
        (["--users", "0"], "argument --users: must be positive"),
        (["--gap", "soon"], "argument --gap: not a number"),
        (["--duration", "5", "--gap", "4"], "--duration must be at least three --gap long"),
    ]:
        result = subprocess.run(
            [*CLI, "demo", *args], capture_output=True, text=True, timeout=60, check=False
        )
        assert result.returncode == 2, result.stderr
        assert message in result.stderr


def test_broker_command_runs_in_foreground_and_stops_on_ctrl_c(tmp_path: Path) -> None:
    process = subprocess.Popen(
        [*CLI, "broker", "--data-dir", str(tmp_path / "data")],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert process.stdout is not None
        line = process.stdout.readline()  # blocks until the broker is ready (or the CLI exits)
        match = re.search(r"bootstrap\.servers=(\S+)", line)
        assert match, f"no bootstrap address in {line!r}"
        admin = AdminClient({"bootstrap.servers": match.group(1)})
        assert wait_for(lambda: admin.list_topics(timeout=5).brokers, message="metadata")
        process.send_signal(signal.SIGINT)
        assert process.wait(timeout=60) == 0
        assert (tmp_path / "data" / "data" / "meta.properties").is_file()  # kept: user's dir
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()


def test_missing_java_is_a_clear_cli_error(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k != "JAVA_HOME"} | {"PATH": str(tmp_path)}
    result = subprocess.run(
        [*CLI, "broker"], capture_output=True, text=True, timeout=60, env=env, check=False
    )
    assert result.returncode == 2
    assert "progress-control: error: Java was not found" in result.stderr
