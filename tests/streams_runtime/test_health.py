"""``/health/live`` and ``/health/ready`` decided from state, heartbeat and tasks
(:mod:`streams_runtime.health`), the liveness deadline setting, and bare ``KafkaError``s turned
into exceptions; no broker."""

from __future__ import annotations

import sys

import pytest
from confluent_kafka import KafkaError, KafkaException
from pydantic import ValidationError

from streams_runtime.app_state import AppState
from streams_runtime.errors import as_exception
from streams_runtime.health import Heartbeat, InstanceHealth, TaskView
from streams_runtime.record import TaskId
from streams_runtime.settings import RuntimeSettings

BASE = {"application_id": "health", "bootstrap_servers": "localhost:9092"}


class Stale(Heartbeat):
    def __init__(self, age_s: float) -> None:
        super().__init__()
        self.age = age_s

    def age_s(self) -> float:
        return self.age


def health(state: AppState, age_s: float, restoring: int = 0) -> InstanceHealth:
    tasks = TaskView(
        frozenset(TaskId(0, p) for p in range(4)), frozenset(TaskId(0, p) for p in range(restoring))
    )
    return InstanceHealth(lambda: state, Stale(age_s), lambda: tasks, deadline_s=60.0)


def test_live_while_the_loop_turns_within_the_deadline() -> None:
    ok, body = health(AppState.RUNNING, 1.0).live()
    assert ok
    assert body == {"status": "ok", "state": "RUNNING", "loop_idle_ms": 1000, "deadline_ms": 60000}
    ok, body = health(AppState.RUNNING, 61.0).live()
    assert not ok
    assert "deadline" in str(body["reason"])


def test_ready_only_running_with_every_active_task_restored() -> None:
    ok, body = health(AppState.RUNNING, 0.0).ready()
    assert ok
    assert body == {"status": "ok", "state": "RUNNING", "active_tasks": 4, "restoring_tasks": 0}
    ok, body = health(AppState.REBALANCING, 0.0, restoring=2).ready()
    assert not ok
    assert body["reason"] == "restoring 0_0, 0_1"
    for state in (AppState.STARTING, AppState.REBALANCING, AppState.PENDING_SHUTDOWN):
        ok, body = health(state, 0.0).ready()
        assert not ok
        assert body["reason"] == f"the app is {state}"


def test_liveness_deadline_default_and_validation() -> None:
    # At least a minute; three at-least-once commit intervals (30 s each) by default.
    assert RuntimeSettings(**BASE).liveness_deadline_ms == 90_000
    eos = RuntimeSettings(**BASE, processing_guarantee="exactly_once")
    assert eos.liveness_deadline_ms == 60_000
    slow_commits = RuntimeSettings(**BASE, commit_interval_ms=40_000)
    assert slow_commits.liveness_deadline_ms == 120_000
    assert RuntimeSettings(**BASE, commit_interval_ms=1000, liveness_deadline_ms=5000)
    with pytest.raises(ValidationError, match="liveness_deadline_ms"):
        RuntimeSettings(**BASE, liveness_deadline_ms=30_000)  # the ALOS commit interval


def test_a_bare_kafka_error_escapes_except_base_exception_until_converted() -> None:
    error = KafkaError(KafkaError._DESTROY)
    caught: object = None
    try:
        try:
            raise error  # type: ignore[misc]  # what confluent-kafka's C code can do
        except BaseException:
            pytest.fail("a bare KafkaError is not a BaseException subclass")
    except:  # noqa: E722 - only a bare except sees it
        caught = sys.exc_info()[1]
    converted = as_exception(caught)
    assert isinstance(converted, KafkaException)
    assert converted.args[0].code() == KafkaError._DESTROY
    plain = ValueError("x")
    assert as_exception(plain) is plain
