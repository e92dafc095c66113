"""``python -m bench [NAME ...]``: run the named benchmarks (all when none is named)."""

from __future__ import annotations

import argparse
import importlib

BENCHMARKS = {
    "broker-startup": "bench.broker_startup",
    "producer-throughput": "bench.producer_throughput",
    "runtime-throughput": "bench.runtime_throughput",
    "engines": "bench.engines",
    "soak": "bench.soak",
    "query-failover": "bench.query_failover",
    "promise-at-scale": "bench.promise_at_scale",
    "scale-out": "bench.scale_out",
    "tick-volume": "bench.tick_volume",
    "window-close-delay": "bench.window_close_delay",
    "sidecar": "bench.sidecar",
    "slow-connections": "bench.slow_connections",
    "spark-sessionization": "bench.spark_sessionization",
}


def main() -> None:
    parser = argparse.ArgumentParser(prog="bench")
    parser.add_argument("names", nargs="*", choices=[[], *BENCHMARKS], default=[])
    names = parser.parse_args().names or list(BENCHMARKS)
    for name in names:
        print(f"== {name}", flush=True)
        importlib.import_module(BENCHMARKS[name]).main()


if __name__ == "__main__":
    main()
