"""What a scenario run is asked to do and what it gives back: the scenarios' names,
:class:`Plan` (stream lengths, the fault's timing, the checks' deadlines) and :class:`RunResult`
(everything the run produced, for the checkers and the benchmark)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from harness.session_cluster.checks import Behind, SessionCheck
from harness.session_cluster.clicks import Session
from harness.session_cluster.config import Guarantee, TopologyName

ScenarioName = Literal[
    "kill", "pause", "rolling", "far-behind", "kill-then-pause", "kill-then-rolling", "plain"
]
SCENARIOS: tuple[ScenarioName, ...] = ("kill", "pause", "rolling", "far-behind")
"""The test suite's; the benchmark runs ``kill-then-pause`` and a ``plain`` baseline, the
Processor API's test ``kill-then-rolling``."""


@dataclass(frozen=True)
class Plan:
    """How one scenario runs: stream lengths, the fault's timing, the checks' deadlines."""

    guarantee: Guarantee = "exactly_once"
    progress_propagation: bool = True
    topology: TopologyName = "dsl"
    instances: int = 3
    seed: int = 1
    users: int = 36
    wave_s: float = 5.0
    """Input on every partition before the fault, and again after recovery."""
    victim_s: float = 1.0
    """After the fault, input on the victim's partitions only (the others idle: ticks). Its
    tasks' new owners replay it, with what was not committed, each task at its own pace, so a
    repartition partition can get one task's fresher records before another's older ones:
    with more than gap + grace between them, the older ones are late even without ticks
    (as in Kafka Streams). Kept well below 3 s so that without ticks nothing is late."""
    pause_s: float = 12.0
    """How long the paused instance stays stopped (pause scenario)."""
    backlog: int = 2_000
    """Old records on the far-behind partition (far-behind scenario)."""
    backlog_age_s: float = 180.0
    catch_up_s: float = 8.0
    """How long the far-behind partition takes to write the second half of its backlog (the
    group forms meanwhile, and the other partitions' tasks tick)."""
    liveness_timeout_s: float = 60.0
    """With ticks, how long after the last wave all its sessions may take to come out."""
    idle_s: float = 0.0
    """An idle phase after the last wave (ticks counted there; 0: none)."""


@dataclass
class RunResult:
    """Everything one scenario run produced, for the checkers and the benchmark."""

    scenario: ScenarioName
    plan: Plan
    topics: dict[str, str]
    """The run's ``input``, ``repartition`` and ``out`` topics (kept on the broker)."""
    expected: list[Session]
    found: list[Session]
    check: SessionCheck
    behind_input: list[Behind]
    """Data behind the interceptor's ticks on the input: the scenario broke the promise
    itself (out-of-order input stays out of order), so the other checks would mean nothing."""
    behind_repartition: list[Behind]
    behind_out: list[Behind]
    late_drops: float
    unscraped: list[str]
    progress_ticks: float
    clicks: int
    last_click_ms: int
    close_delays_ms: list[int]
    """Per session of the last wave closed after the data stopped: when it was read from
    ``out`` minus when it was due (end + gap + grace)."""
    all_closed_on_ticks: bool
    """Every session of the input was out before the flush (only ticks closed the last ones)."""
    idle_ticks: int
    idle_partitions: int
    idle_s: float
    events: list[str]
    logs: dict[str, list[str]]

    @property
    def ticks_per_idle_partition_hour(self) -> float:
        hours = self.idle_s / 3600
        return self.idle_ticks / (self.idle_partitions * hours) if hours else float("nan")

    def failures(self) -> list[str]:
        """What broke the promise in this run (empty: nothing)."""
        problems = []
        if self.behind_input:
            problems.append(f"the input itself has data behind its ticks: {self.behind_input[0]}")
        if not self.check.ok:
            problems.append(f"results: {self.check.summary()}")
        for name, behind in (("repartition", self.behind_repartition), ("out", self.behind_out)):
            if behind:
                shown = "; ".join(str(b) for b in behind[:5])
                problems.append(f"{len(behind)} records behind a tick on {name}: {shown}")
        if self.late_drops:
            problems.append(f"{self.late_drops:.0f} records dropped as late")
        if self.plan.progress_propagation and not self.all_closed_on_ticks:
            problems.append("some sessions did not close on ticks before the flush")
        return problems
