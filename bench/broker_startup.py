"""Embedded broker start-up: cold (empty jar cache, and optionally empty Maven repo) vs warm.

Cold start = jar fetch + storage format + JVM start until metadata is served. Warm start reuses the
cache. The ratio warm/cold is what the cache buys.
"""

from __future__ import annotations

import os
import statistics
import tempfile
import time
from pathlib import Path

from progress_control_apps.dev.broker import BrokerSettings, EmbeddedKafkaBroker

WARM_RUNS = 3


def _timed_start(cache_dir: Path) -> float:
    started = time.perf_counter()
    broker = EmbeddedKafkaBroker(BrokerSettings(cache_dir=cache_dir)).start()
    elapsed = time.perf_counter() - started
    broker.stop()
    return elapsed


def main() -> None:
    with tempfile.TemporaryDirectory(prefix="bench-broker-") as tmp:
        cache = Path(tmp) / "cache"
        if os.environ.get("BENCH_COLD_MAVEN") == "1":
            # Also empty Maven's local repository: every jar comes from Maven Central.
            os.environ["PROGRESS_CONTROL_MAVEN_REPO"] = str(Path(tmp) / "m2")
        cold = _timed_start(cache)
        os.environ.pop("PROGRESS_CONTROL_MAVEN_REPO", None)
        warm = [_timed_start(cache) for _ in range(WARM_RUNS)]
    warm_median = statistics.median(warm)
    print(f"cold start (empty jar cache): {cold:6.2f} s")
    print(
        f"warm start (median of {WARM_RUNS}): {warm_median:6.2f} s  {[round(w, 2) for w in warm]}"
    )
    print(f"warm / cold: {warm_median / cold:.2f}")


if __name__ == "__main__":
    main()
