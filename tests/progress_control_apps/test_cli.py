"""The ``progress-control`` command line, run as a user runs it."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from confluent_kafka.admin import AdminClient

from tests.helpers import wait_for

CLI = [sys.executable, "-m", "progress_control_apps.cli"]


def test_demo_rejects_bad_options_naming_them() -> None:
    # The demo itself runs in tests/progress_control_apps/demo/test_demo.py; here only its command
    # line.
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


@pytest.mark.broker  # starts the jar broker itself
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


def test_version_is_the_distributions() -> None:
    from importlib import metadata

    result = subprocess.run(
        [*CLI, "--version"], capture_output=True, text=True, timeout=60, check=False
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == f"progress-control {metadata.version('kafka-progress-control')}"


def test_invalid_log_level_is_a_usage_error() -> None:
    result = subprocess.run(
        [*CLI, "--log-level", "LOUD", "autoload-path"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 2
    assert "Traceback" not in result.stderr
    assert result.stderr.startswith("usage: progress-control")
    message = "argument --log-level: invalid log level 'LOUD' (choose from DEBUG, INFO"
    assert message in result.stderr
    # Any case is fine, and so is WARN.
    for level in ("debug", "Warn"):
        ok = subprocess.run(
            [*CLI, "--log-level", level, "autoload-path"],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert ok.returncode == 0, ok.stderr


def test_run_a_missing_command_exits_127_like_a_shell(tmp_path: Path) -> None:
    result = subprocess.run(
        [*CLI, "run", "--", "no-such-command-pc17", "--flag"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 127
    assert result.stderr == "progress-control run: no-such-command-pc17: command not found\n"

    # A file that is not executable: 126, as a shell says it.
    script = tmp_path / "app.sh"
    script.write_text("#!/bin/sh\necho hi\n")
    result = subprocess.run(
        [*CLI, "run", "--", str(script)], capture_output=True, text=True, timeout=60, check=False
    )
    assert result.returncode == 126
    assert result.stderr == f"progress-control run: {script}: permission denied\n"
    # And a command that exists runs, with its own exit code.
    script.chmod(0o755)
    result = subprocess.run(
        [*CLI, "run", "--", str(script)], capture_output=True, text=True, timeout=60, check=False
    )
    assert (result.returncode, result.stdout) == (0, "hi\n"), result.stderr


def test_run_refuses_opentelemetry_instrument_inside_it() -> None:
    """Nested so, OpenTelemetry's start-up hook would hide ours: the app would run without
    progress control and nothing would say so (docs/producers.md, "With OpenTelemetry")."""
    result = subprocess.run(
        [*CLI, "run", "--", "opentelemetry-instrument", "python", "app.py"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 2
    assert "opentelemetry-instrument progress-control run -- python app.py" in result.stderr


def test_json_logs_carry_structured_fields() -> None:
    code = """
import logging, structlog
from progress_control.logging import configure_logging
configure_logging("INFO", json=True)
log = logging.getLogger("interceptor.sender")
log.warning("tick to %(topic)s[%(partition)d] failed", {"topic": "clicks", "partition": 3})
log.info("tick sent", extra={"topic": "clicks", "partition": 1, "timestamp_ms": 5})
structlog.get_logger("sidecar").info("partition idle", topic="views", partition=0)
try:
    raise ValueError("boom")
except ValueError:
    log.exception("send failed", extra={"topic": "clicks"})
"""
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True
    )
    lines = [json.loads(line) for line in result.stderr.splitlines()]
    assert len(lines) == 4, result.stderr
    first, second, third, fourth = lines
    assert first | {"event": "tick to clicks[3] failed", "topic": "clicks", "partition": 3} == first
    assert first["level"] == "warning"
    assert first["logger"] == "interceptor.sender"
    assert "timestamp" in first
    assert second | {"event": "tick sent", "topic": "clicks", "partition": 1} == second
    assert second["timestamp_ms"] == 5
    assert third | {"event": "partition idle", "topic": "views", "partition": 0} == third
    assert fourth["event"] == "send failed"
    assert fourth["topic"] == "clicks"
    assert "ValueError: boom" in fourth["exception"]
