"""The Processor API where users run it: issue 24's sessions written as a user processor (a
session store and a stream-time punctuator, harness/session_cluster/app.py's ``Sessionizer``)
on three runtime processes under exactly-once, through a SIGKILL and then a rolling restart, in
one run (``harness/session_cluster/``'s ``kill-then-rolling``). After the input stops, only
ticks move the processor's stream time: every session must still come out, on ticks alone.

Each run checks what the DSL's runs check (tests/streams_runtime/cluster/test_promise.py): the
sessions on ``out`` are the ground truth, each exactly once (what punctuators forwarded before a
crash is neither lost nor repeated); nothing on the repartition topic or ``out`` is behind a
tick written before it (the processor's declared progress holds); and after every fault the
group was stable again with every instance running and owning tasks."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.session_cluster.plan import Plan
from harness.session_cluster.scenarios import run_scenario

pytestmark = pytest.mark.broker


def test_a_punctuating_processor_is_exact_through_a_kill_and_a_rolling_restart(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    plan = Plan(guarantee="exactly_once", topology="processor")
    result = run_scenario("kill-then-rolling", kafka_bootstrap, tmp_path, plan)
    events = "\n  ".join(result.events)
    logs = "\n  ".join(f"{name}: {tail}" for name, tail in result.logs.items())
    context = f"\nsteps:\n  {events}\nlogs:\n  {logs}"
    assert result.behind_input == [], f"the scenario broke its input: {result.behind_input[0]}"
    assert result.check.ok, result.check.summary() + context
    assert result.behind_repartition == [], context
    assert result.behind_out == [], context
    assert result.progress_ticks > 0, "the runtime sent no ticks" + context
    assert result.all_closed_on_ticks, "sessions left open on ticks" + context
    # Stable again, every instance running and owning tasks: after the kill and each restart.
    assert len([e for e in result.events if "stable group" in e]) >= 5, context
