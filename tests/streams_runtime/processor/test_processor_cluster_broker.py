"""The Processor API where users run it: issue 24's sessions written as a user processor (a
session store and a stream-time punctuator, harness/session_cluster/app.py's ``Sessionizer``)
on three runtime processes under exactly-once, through a SIGKILL and through a rolling restart
(``harness/session_cluster/``). After the input stops, only ticks move the processor's stream
time: every session must still come out, on ticks alone.

Each run checks what the DSL's runs check (tests/streams_runtime/cluster/test_promise.py): the
sessions on ``out`` are the ground truth, each exactly once (what punctuators forwarded before a
crash is neither lost nor repeated); nothing on the repartition topic or ``out`` is behind a
tick written before it (the processor's declared progress holds); and after every fault the
group was stable again with every instance running and owning tasks."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.session_cluster.plan import Plan, ScenarioName
from harness.session_cluster.scenarios import run_scenario

pytestmark = pytest.mark.broker


@pytest.mark.parametrize("scenario", ["kill", "rolling"])
def test_a_punctuating_processor_is_exact_through_failures(
    scenario: ScenarioName, kafka_bootstrap: str, tmp_path: Path
) -> None:
    plan = Plan(guarantee="exactly_once", topology="processor")
    result = run_scenario(scenario, kafka_bootstrap, tmp_path, plan)
    events = "\n  ".join(result.events)
    logs = "\n  ".join(f"{name}: {tail}" for name, tail in result.logs.items())
    context = f"\nsteps:\n  {events}\nlogs:\n  {logs}"
    assert result.behind_input == [], f"the scenario broke its input: {result.behind_input[0]}"
    assert result.check.ok, result.check.summary() + context
    assert result.behind_repartition == [], context
    assert result.behind_out == [], context
    assert result.progress_ticks > 0, "the runtime sent no ticks" + context
    assert result.all_closed_on_ticks, "sessions left open on ticks" + context
    stable = [e for e in result.events if "stable group" in e]
    assert len(stable) >= (2 if scenario == "kill" else 4), context
