"""What the run is made of: the pipeline's plan, the labels, the paths."""

from __future__ import annotations

import random
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
CHART = ROOT / "helm" / "progress-control"
DASHBOARD = CHART / "files" / "dashboard.json"
DEFAULT_OUT = ROOT / "docs" / "operations" / "img" / "dashboard.png"

SCRAPE_INTERVAL_S = 5
"""Prometheus' scrape and rule evaluation interval, and the query step."""
NAMESPACE = "demo"
"""The ``namespace`` label every target gets (what a ServiceMonitor's target carries)."""

SIDECAR_POD = "progress-control-sidecar-0"
PRODUCER_POD = "clicks-producer-0"
RUNTIME_POD = "click-sessions-0"
SIDECAR_SOURCE = "progress-control-sidecar"
PRODUCER_SOURCE = "clicks-producer"

CLICK_PARTITIONS = 4
ORDER_PARTITIONS = 2
SESSION_GAP_MS = 10_000
USERS = 40

PARTITION_PLAN: tuple[tuple[int, int, tuple[tuple[float, float], ...]], ...] = (
    # (partition, records per second, spans of the run it writes in, as fractions of it)
    (0, 20, ((0.0, 0.55), (0.72, 1.0))),
    (1, 10, ((0.0, 1.0),)),
    (2, 5, ((0.0, 0.3),)),
    (3, 5, ((0.0, 0.1), (0.35, 0.45), (0.7, 0.8))),
)
"""The clicks producer's schedule: partitions go idle (and get ticks) and come back."""
BURST_AT = 0.5
BURST_RECORDS = 1_600_000
"""One burst into partitions 0 and 1, half-way: consumer lag and throughput move."""
STALL_S = (-3.0, 30.0)
"""The runtime is stopped (SIGSTOP, as a long pause or a starved pod would be) from 3 s before
the burst to 30 s after it: the burst piles up as lag, and the promise falls behind."""
ORDER_BATCHES_AT = (0.05, 0.6)
ORDER_BATCH_RECORDS = 500

TIMEOUT_S = 30.0
RANDOM = random.Random(40)  # noqa: S311 - made-up clicks, not secrets


class DashboardPictureError(RuntimeError):
    """A step of the run failed (the message says which, and where its log is)."""
