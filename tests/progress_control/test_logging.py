"""Log lines carry structured fields (issue 17): real log calls of the interceptor, the sidecar,
the streams runtime and the protocol, rendered by the project's own configuration
(:func:`progress_control.logging.configure_logging`), as JSON and on a console; and every log
call in those packages passes its values as a mapping, so none of them is a pre-formatted
string."""

from __future__ import annotations

import ast
import io
import json
import logging
import re
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import structlog
from confluent_kafka import KafkaError
from prometheus_client import CollectorRegistry, Counter

from progress_control.logging import client_logger, configure_logging
from progress_control.protocol import CONTROL_HEADER, is_control_record
from progress_control.ticks.metrics import ProgressControlMetrics
from progress_control.ticks.sender import TickSender
from progress_control.ticks.settings import TickSettings
from progress_control_apps.dev.ports import free_port
from sidecar.admission import ActivityAdmission, ReportedAck
from streams_runtime.errors import BadRecordHandler
from streams_runtime.metrics import RuntimeMetrics
from streams_runtime.record import SourceRecord
from streams_runtime.settings import BadRecordPolicy
from streams_runtime.state.directory import read_checkpoint
from tests.paths import ROOT

PACKAGES = (
    "interceptor",
    "sidecar",
    "streams_runtime",
    "progress_control",
    "progress_control_apps",
)
# Converted by whoever owns them; drop an entry when its calls use the mapping form.
NOT_YET: set[str] = set()
LEVELS = {"debug", "info", "warning", "error", "exception", "critical"}


class _Logs:
    """What the root logger rendered, as text and as parsed JSON lines."""

    def __init__(self, stream: io.StringIO) -> None:
        self._stream = stream

    @property
    def text(self) -> str:
        return self._stream.getvalue()

    def json(self) -> list[dict[str, Any]]:
        return [json.loads(line) for line in self.text.splitlines()]

    def one(self, logger: str) -> dict[str, Any]:
        lines = [line for line in self.json() if line["logger"] == logger]
        assert len(lines) == 1, self.text
        return lines[0]


def _configured(*, json: bool) -> Iterator[_Logs]:
    """The project's logging configuration on a buffer; the root logger's handlers (pytest's
    capture) and structlog are restored after."""
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    stream = io.StringIO()
    configure_logging("DEBUG", json=json, stream=stream)
    try:
        yield _Logs(stream)
    finally:
        root.handlers[:] = handlers
        root.setLevel(level)
        structlog.reset_defaults()


@pytest.fixture
def rendered() -> Iterator[_Logs]:
    """JSON lines, as in a container."""
    yield from _configured(json=True)


@pytest.fixture
def console() -> Iterator[_Logs]:
    """The console format, as on a terminal (without colors)."""
    yield from _configured(json=False)


class _Delivered:
    """A delivery report's message, as confluent-kafka hands it to ``on_delivery``."""

    def topic(self) -> str:
        return "clicks"

    def partition(self) -> int:
        return 3

    def timestamp(self) -> tuple[int, int]:
        return (1, 1_700_000_000_000)


class _Record:
    def __init__(self, headers: list[tuple[str, bytes]]) -> None:
        self._headers = headers

    def headers(self) -> list[tuple[str, bytes]]:
        return self._headers

    def topic(self) -> str:
        return "views"

    def partition(self) -> int:
        return 1

    def offset(self) -> int:
        return 42


def _admission() -> ActivityAdmission:
    dropped = Counter("dropped", "d", ["origin", "reason"], registry=CollectorRegistry())
    return ActivityAdmission(
        include_topic=lambda _topic: True,
        partition_count=lambda _topic: 4,
        tracked=lambda _key: False,
        tracked_count=lambda: 0,
        max_skew_ms=60_000,
        max_tracked_partitions=10,
        dropped=dropped,
        clock_ms=lambda: 1_700_000_000_000,
    )


def test_interceptor_tick_failure_has_topic_partition_and_error(rendered: _Logs) -> None:
    sender = TickSender(TickSettings(), {}, ProgressControlMetrics(lambda: 0))
    sender._on_delivery(KafkaError(KafkaError._MSG_TIMED_OUT), _Delivered())  # type: ignore[arg-type]
    line = rendered.one("progress_control.ticks.sender")
    assert line["level"] == "warning"
    assert line["event"].startswith("tick to clicks[3] failed: ")
    assert line | {"topic": "clicks", "partition": 3, "code": "_MSG_TIMED_OUT"} == line
    assert line["error"]
    assert isinstance(line["error"], str)


def test_sidecar_dropped_report_has_source_topic_partition_and_reason(rendered: _Logs) -> None:
    ack = ReportedAck("app:1:beef", "clicks", 9, 1_700_000_000_000, 0.0)
    assert not _admission().admit_report(ack)  # partition 9 of a 4-partition topic
    line = rendered.one("sidecar.admission")
    assert line["event"].startswith("dropped report activity from 'app:1:beef' for 'clicks'[9]")
    expected = {
        "origin": "report",
        "source": "app:1:beef",
        "topic": "clicks",
        "partition": 9,
        "reason": "unknown-partition",
    }
    assert line | expected == line


def test_runtime_bad_record_and_checkpoint_have_their_fields(
    rendered: _Logs, tmp_path: Path
) -> None:
    handler = BadRecordHandler(
        BadRecordPolicy.LOG_AND_SKIP, "dlq", lambda *_args: None, RuntimeMetrics("app")
    )
    record = SourceRecord("clicks", 2, 17, 1_000, b"k", b"\xff", None)
    handler.handle(record, "deserialization", ValueError("not UTF-8"))
    line = rendered.one("streams_runtime.errors")
    assert line["event"] == "skipping bad record clicks[2]@17: deserialization: not UTF-8"
    expected = {
        "topic": "clicks",
        "partition": 2,
        "offset": 17,
        "reason": "deserialization",
        "error": "not UTF-8",
        "error_type": "ValueError",
    }
    assert line | expected == line

    path = tmp_path / "checkpoint.json"
    path.write_text("{not json")
    assert read_checkpoint(path) is None
    line = rendered.one("streams_runtime.state.directory")
    assert line["event"].startswith(f"ignoring invalid checkpoint {path}: ")
    assert line["path"] == str(path)
    assert isinstance(line["error"], str)


def test_protocol_and_broker_lines_have_their_fields(rendered: _Logs) -> None:
    assert not is_control_record(_Record([(CONTROL_HEADER, b"\x00garbage")]))
    line = rendered.one("progress_control.protocol")
    assert line["event"].startswith("rejected malformed progress-control header: ")
    assert line | {"topic": "views", "partition": 1, "offset": 42} == line
    assert line["reason"]
    assert line["reason"] in line["event"]

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        assert free_port("127.0.0.1", port) != port
    line = rendered.one("progress_control_apps.dev.ports")
    assert line | {"port": port, "host": "127.0.0.1"} == line


def test_console_shows_the_message_and_only_the_fields_it_does_not(console: _Logs) -> None:
    sender = TickSender(TickSettings(), {}, ProgressControlMetrics(lambda: 0))
    sender._on_delivery(KafkaError(KafkaError._MSG_TIMED_OUT), _Delivered())  # type: ignore[arg-type]
    (line,) = console.text.splitlines()
    assert "tick to clicks[3] failed: " in line
    assert "code=_MSG_TIMED_OUT" in line  # not in the message
    assert "topic=" not in line
    assert "partition=" not in line


def _log_calls(path: Path) -> Iterator[ast.Call]:
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr in LEVELS
            and isinstance(node.func.value, ast.Name)
            and node.func.value.id in {"logger", "log"}
        ):
            yield node


def _template(node: ast.expr) -> str | None:
    """The message's literal text, or ``None`` when it is built at run time."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        left, right = _template(node.left), _template(node.right)
        return None if left is None or right is None else left + right
    if isinstance(node, ast.IfExp):  # either branch: take both placeholders
        body, orelse = _template(node.body), _template(node.orelse)
        return None if body is None or orelse is None else body + orelse
    return None


def test_every_log_call_passes_its_values_as_a_mapping() -> None:
    """A log call with values uses ``"... %(topic)s ...", {"topic": ...}``, never positional
    ``%s`` arguments (the JSON ``event`` would be a pre-formatted string); a literal mapping
    has a value for each placeholder."""
    problems = []
    calls = 0
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            name = path.relative_to(ROOT).as_posix()
            if name in NOT_YET:
                continue
            for call in _log_calls(path):
                calls += 1
                where = f"{name}:{call.lineno}"
                if not call.args:
                    problems.append(f"{where}: no message")
                    continue
                template = _template(call.args[0])
                if template is None:
                    problems.append(f"{where}: the message is not a literal")
                    continue
                positional = re.findall(r"%[^(%]", template.replace("%%", ""))
                names = set(re.findall(r"%\((\w+)\)", template))
                if len(call.args) == 1:
                    if positional or names:
                        problems.append(f"{where}: placeholders without values")
                elif len(call.args) > 2 or positional:
                    problems.append(f"{where}: positional arguments")
                elif isinstance(mapping := call.args[1], ast.Dict):
                    keys = {k.value for k in mapping.keys if isinstance(k, ast.Constant)}
                    if None not in mapping.keys and names - keys:
                        problems.append(f"{where}: no value for {sorted(names - keys)}")
                elif not isinstance(mapping, ast.Name):
                    problems.append(f"{where}: the values are not a mapping")
    assert calls > 50  # the scan found the packages' calls
    assert not problems, "\n".join(problems)


def _librdkafka_line(logger: logging.Logger, level: int, facility: str, message: str) -> None:
    # confluent-kafka logs each line as ``"%s [%s] %s", facility, client name, message``.
    logger.log(level, "%s [%s] %s", facility, "rdkafka#producer-1", message)


def test_client_logger_turns_coordinator_load_retries_into_debug_lines(
    caplog: pytest.LogCaptureFixture,
) -> None:
    logger = client_logger("tests.librdkafka")
    retry = (
        "Failed to acquire idempotence PID from broker b/1: Coordinator load in progress: retrying"
    )
    with caplog.at_level(logging.INFO, logger="tests.librdkafka"):
        _librdkafka_line(logger, logging.WARNING, "GETPID", retry)
        _librdkafka_line(logger, logging.WARNING, "GETPID", "Fatal idempotent producer error")
    assert [r.getMessage() for r in caplog.records] == [
        "GETPID [rdkafka#producer-1] Fatal idempotent producer error"
    ]
    caplog.clear()
    with caplog.at_level(logging.DEBUG, logger="tests.librdkafka"):
        _librdkafka_line(logger, logging.WARNING, "GETPID", retry)
    assert [(r.levelname, r.args[-1]) for r in caplog.records] == [("DEBUG", retry)]  # type: ignore[index]
