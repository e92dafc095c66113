"""What an operator's log pipeline gets from ``progress-control sidecar`` with JSON logs: JSON
lines only, and with the broker down a handful of warnings, not one per connection attempt."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from collections import Counter

from tests.interceptor.test_producer import CLI
from tests.sidecar.process import dead_port


def test_json_lines_only_and_a_dead_broker_is_not_a_flood() -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PROGRESS_CONTROL_")}
    env |= {
        "PROGRESS_CONTROL_KAFKA__BOOTSTRAP_SERVERS": f"127.0.0.1:{dead_port()}",
        "PROGRESS_CONTROL_LOG_FORMAT": "json",
        "PROGRESS_CONTROL_HTTP_PORT": "0",
        "PROGRESS_CONTROL_REPORT_LISTEN": "",
    }
    process = subprocess.Popen(
        [*CLI, "sidecar"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        stdin=subprocess.DEVNULL,
        text=True,
    )
    time.sleep(8)  # librdkafka retries a refused connection every 0.1-1 s: dozens of failures
    process.send_signal(signal.SIGTERM)
    stdout, stderr = process.communicate(timeout=60)
    assert process.returncode == 0, stderr
    assert stdout == ""
    lines = [json.loads(line) for line in stderr.splitlines()]  # each one JSON
    events = Counter(line["event"].split(":")[0] for line in lines)
    assert "serving HTTP on port" in {line["event"].rsplit(" ", 1)[0] for line in lines}
    warnings = [line for line in lines if line["level"] == "warning"]
    assert 1 <= len(warnings) <= 6, events
