"""The main job end to end: real broker, real streams runtime, real Spark, run by its command
line. The report's numbers are parsed and checked against the topics the job wrote, and the
terminal holds the steps and the report only."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from progress_control.protocol import is_control_record
from progress_control_apps.demo.clicks import plan_clicks
from tests.helpers import TopicReader

pytestmark = pytest.mark.broker

CLI = [sys.executable, "-m", "progress_control_apps.cli"]
LONG = os.environ.get("PROGRESS_CONTROL_LONG_TESTS") == "1"


def report_rows(text: str) -> dict[str, tuple[str, str]]:
    """Label -> (with control, without control) from the printed table."""
    rows = {}
    for line in text[text.index("Report\n") :].splitlines()[2:]:
        match = re.match(r"^(\S.*?)\s{2,}(\S.*?)\s{2,}(\S.*?)$", line)
        if match:
            rows[match[1]] = (match[2], match[3])
    return rows


def test_main_job_report_on_a_quiet_terminal(kafka_bootstrap: str, tmp_path: Path) -> None:
    """``progress-control demo`` as a user runs it: its own Spark, the suite's broker. The
    terminal shows the steps and the report, nothing else; Spark's and librdkafka's logs are in
    files under the output directory."""
    out_dir = tmp_path / "out"
    result = subprocess.run(
        [
            *CLI,
            "demo",
            "--bootstrap-servers",
            kafka_bootstrap,
            "--duration",
            "12",
            "--users",
            "6",
            "--partitions",
            "2",
            "--gap",
            "3",
            "--output-dir",
            str(out_dir),
        ],
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
        stdin=subprocess.DEVNULL,
    )
    text = result.stdout
    assert result.returncode == 0, f"{text}\n{result.stderr}"
    # Quiet: no Spark (log4j) or librdkafka line, nothing at all on stderr, and every line
    # before the report is a step.
    assert result.stderr == ""
    assert not re.search(r"^\d\d/\d\d/\d\d \d\d:\d\d:\d\d (WARN|INFO|ERROR)", text, re.M)
    assert not re.search(r"^%\d\|", text, re.M)
    steps, _, table = text.partition("\nReport\n")
    assert table, text
    for line in steps.splitlines():  # start, progress of a first-run fetch, done
        assert re.match(r"^\[\d/\d\] .* (\.\.\.( \d+s(: .*)?)?|done in \d+\.\ds)$", line), line
    logs = out_dir / "logs"
    assert f"Logs: {logs} (spark.log, demo.log, native-stderr.log)" in text
    # ... and the logs are in their files: Spark's own warnings (streaming disables AQE for
    # every query it starts) and the runtime's INFO records.
    assert re.search(r" WARN \w+: ", (logs / "spark.log").read_text())
    assert "[streams_runtime.app]" in (logs / "demo.log").read_text()
    assert (logs / "native-stderr.log").is_file()

    rows = report_rows(text)
    expected = len(plan_clicks(6, 12, 3).sessions)
    assert rows["sessions (ground truth)"] == (str(expected), str(expected))
    # With progress control every session closes, in the runtime and in Spark; without it
    # the last ones stay open.
    assert rows["sessions closed by the runtime"][0] == str(expected)
    assert rows["sessions closed by Spark"][0] == str(expected)
    assert int(rows["sessions stuck in the runtime"][1]) > 0
    assert int(rows["sessions closed by the runtime"][1]) < expected
    assert int(rows["control records sent by the producer"][0]) > 0
    assert rows["control records sent by the producer"][1] == "0"
    assert rows["control records sent by the runtime"][1] == "0"

    # The JSON report says the same, and the numbers match the topics the job wrote.
    report = json.loads((out_dir / "report.json").read_text())
    for mode, column in (("with_control", 0), ("without_control", 1)):
        numbers = report[mode]
        assert (
            str(numbers["sessions_closed_runtime"])
            == rows["sessions closed by the runtime"][column]
        )
        assert str(numbers["clicks_sent"]) == rows["clicks sent"][column]
        sessions = TopicReader(kafka_bootstrap, numbers["topics"]["sessions"], 1)
        try:
            closed = [m for m in sessions.read(max_s=5) if not is_control_record(m) and m.value()]
        finally:
            sessions.close()
        assert len(closed) == numbers["sessions_closed_runtime"]
        clicks = TopicReader(kafka_bootstrap, numbers["topics"]["clicks"], 2)
        try:
            data = [m for m in clicks.read(max_s=5) if not is_control_record(m)]
        finally:
            clicks.close()
        assert len(data) == numbers["clicks_sent"]
    delay = report["with_control"]["runtime_delay_s"]
    assert 0 <= delay["min"] <= delay["max"]
    assert (out_dir / "stream-time.png").read_bytes()[:4] == b"\x89PNG"


def test_main_job_in_avro_through_the_registry(
    kafka_bootstrap: str, schema_registry_url: str, tmp_path: Path
) -> None:
    """``progress-control demo --format avro``: every topic's keys and values registry-framed
    Avro, ticks with a null key there, and the same report: every session closes with progress
    control in the runtime. Spark's part (decoding the events with ``from_avro``) in the long
    form only (``PROGRESS_CONTROL_LONG_TESTS=1``, some two minutes more): the Spark jobs' own
    tests read registry-framed Avro with and without ticks (tests/progress_control_apps/spark/)."""
    out_dir = tmp_path / "out"
    result = subprocess.run(
        [
            *CLI,
            "demo",
            *("--format", "avro", "--schema-registry-url", schema_registry_url),
            *(() if LONG else ("--no-spark",)),
            *("--bootstrap-servers", kafka_bootstrap),
            *("--duration", "12", "--users", "6", "--partitions", "2", "--gap", "3"),
            *("--output-dir", str(out_dir)),
        ],
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
        stdin=subprocess.DEVNULL,
    )
    assert result.returncode == 0, f"{result.stdout}\n{result.stderr}"
    rows = report_rows(result.stdout)
    expected = str(len(plan_clicks(6, 12, 3).sessions))
    assert rows["sessions closed by the runtime"][0] == expected
    if LONG:
        assert rows["sessions closed by Spark"][0] == expected
    assert int(rows["sessions stuck in the runtime"][1]) > 0
    topics = json.loads((out_dir / "report.json").read_text())["with_control"]["topics"]
    for kind in ("clicks", "events"):
        reader = TopicReader(kafka_bootstrap, topics[kind], 2)
        try:
            records = reader.read(max_s=5)
        finally:
            reader.close()
        ticks = [m for m in records if is_control_record(m)]
        data = [m for m in records if not is_control_record(m)]
        assert ticks, kind
        assert {m.key() for m in ticks} == {None}, kind
        assert {(m.key() or b"")[:1] for m in data} == {b"\0"}, kind  # Avro, registry-framed
        assert {(m.value() or b"")[:1] for m in data} == {b"\0"}, kind
