"""The main job end to end: real broker, real streams runtime, real Spark. The report's numbers
are parsed and checked against the topics the job wrote."""

from __future__ import annotations

import io
import json
import re
from pathlib import Path

import pytest

from pipeline.clicks import plan_clicks
from pipeline.demo import DemoOptions, run_demo
from progress_control.protocol import is_control_record
from tests.helpers import TopicReader

pytestmark = pytest.mark.broker


def report_rows(text: str) -> dict[str, tuple[str, str]]:
    """Label -> (with control, without control) from the printed table."""
    rows = {}
    for line in text[text.index("Report\n") :].splitlines()[2:]:
        match = re.match(r"^(\S.*?)\s{2,}(\S.*?)\s{2,}(\S.*?)$", line)
        if match:
            rows[match[1]] = (match[2], match[3])
    return rows


def test_main_job_report(kafka_bootstrap: str, spark: object, tmp_path: Path) -> None:
    options = DemoOptions(
        duration_s=24,
        users=6,
        partitions=2,
        gap_s=3,
        output_dir=tmp_path / "out",
        bootstrap_servers=kafka_bootstrap,
    )
    out = io.StringIO()
    assert run_demo(out, options) == 0, out.getvalue()
    text = out.getvalue()
    rows = report_rows(text)
    expected = len(plan_clicks(6, 24, 3).sessions)
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
    report = json.loads((tmp_path / "out" / "report.json").read_text())
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
        clicks = TopicReader(kafka_bootstrap, numbers["topics"]["clicks"], options.partitions)
        try:
            data = [m for m in clicks.read(max_s=5) if not is_control_record(m)]
        finally:
            clicks.close()
        assert len(data) == numbers["clicks_sent"]
    delay = report["with_control"]["runtime_delay_s"]
    assert 0 <= delay["min"] <= delay["max"]
    assert (tmp_path / "out" / "stream-time.png").read_bytes()[:4] == b"\x89PNG"
