"""The command: run the pipeline (or replay a kept run), report, draw."""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
import tempfile
import threading
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any, TextIO

from progress_control_apps.tools.dashboard_picture.apps import producer_app, runtime_app
from progress_control_apps.tools.dashboard_picture.config import (
    DASHBOARD,
    DEFAULT_OUT,
    SCRAPE_INTERVAL_S,
    DashboardPictureError,
)
from progress_control_apps.tools.dashboard_picture.pipeline import (
    Pipeline,
    create_topics,
    delete_topics,
)
from progress_control_apps.tools.dashboard_picture.prometheus import (
    Processes,
    Prometheus,
    find_prometheus,
    render_alert_rules,
)
from progress_control_apps.tools.dashboard_picture.queries import (
    RunResult,
    query_alerts,
    query_panels,
    query_variables,
    report,
)
from progress_control_apps.tools.dashboard_picture.render import render


@contextlib.contextmanager
def _workdir(keep: Path | None) -> Iterator[Path]:
    if keep is not None:
        keep.mkdir(parents=True, exist_ok=True)
        yield keep
        return
    with tempfile.TemporaryDirectory(prefix="dashboard-picture-") as folder:
        yield Path(folder)


def run_pipeline(
    bootstrap: str, duration_s: float, prometheus_binary: Path, workdir: Path, out: TextIO
) -> RunResult:
    """The pipeline for ``duration_s`` under a Prometheus loaded with the chart's alert rules;
    then the dashboard's queries and the alerts over the run."""
    rule_groups = render_alert_rules()
    dashboard: dict[str, Any] = json.loads(DASHBOARD.read_text())
    pipeline = Pipeline(bootstrap, duration_s, workdir)
    create_topics(pipeline.bootstrap, pipeline.topics)
    out.write(f"topics: {pipeline.topics}\nlogs: {workdir}\n")
    processes = Processes()
    stopping = threading.Event()
    try:
        pipeline.start_sidecar(processes)
        out.write(f"sidecar: /metrics on port {pipeline.sidecar_port}\n")
        pipeline.choose_ports()
        prometheus = Prometheus(prometheus_binary, workdir, pipeline.targets(), rule_groups)
        prometheus.start(processes)
        out.write(f"Prometheus: {prometheus.url}, scraping every {SCRAPE_INTERVAL_S} s\n")
        start, started = time.time(), time.monotonic()
        runtime = pipeline.start_apps(processes)
        threading.Thread(
            target=pipeline.write_orders, args=(stopping, started), daemon=True
        ).start()
        stall = threading.Thread(
            target=pipeline.stall, args=(runtime, stopping, started), daemon=True
        )
        stall.start()
        while (elapsed := time.monotonic() - started) < duration_s:
            time.sleep(min(30.0, duration_s - elapsed))
            targets = prometheus.api("targets")["activeTargets"]
            up = sorted(t["labels"]["job"] for t in targets if t["health"] == "up")
            out.write(f"  {time.monotonic() - started:5.0f} s: scraping {', '.join(up)}\n")
            out.flush()
            gone = processes.exited()
            if gone:
                raise DashboardPictureError(f"{gone} exited early; logs in {workdir}")
        end = time.time()
        alerts = query_alerts(prometheus, start, end)
        stopping.set()
        stall.join()
        processes.stop("producer", "runtime", "sidecar")
        panels = query_panels(prometheus, dashboard, start, end)
        variables = query_variables(prometheus, dashboard, start, end)
    finally:
        stopping.set()
        processes.stop()
        delete_topics(pipeline.bootstrap, pipeline.topics)
    return RunResult(start, end, panels, alerts, variables)


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] == "_producer":
        bootstrap, topic, port, duration = argv[1:5]
        producer_app(bootstrap, topic, int(port), float(duration))
        return 0
    if argv and argv[0] == "_runtime":
        runtime_app(*argv[1:6], state_dir=argv[6])
        return 0
    parser = argparse.ArgumentParser(
        prog="python -m progress_control_apps.tools.dashboard_picture",
        description="A picture of the chart's Grafana dashboard from a real run (drawn with "
        "matplotlib, not by Grafana).",
    )
    parser.add_argument("--bootstrap-servers", default="127.0.0.1:19096")
    parser.add_argument("--minutes", type=float, default=10.0, help="how long the pipeline runs")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    parser.add_argument("--prometheus", help="a Prometheus server binary")
    parser.add_argument(
        "--keep", type=Path, help="keep the logs, Prometheus' data and results.json here"
    )
    parser.add_argument(
        "--replay",
        type=Path,
        help="draw a kept results.json again (no run): for changes to the drawing",
    )
    args = parser.parse_args(argv)
    out = sys.stdout
    if args.replay is not None:
        result = RunResult.load(args.replay)
    else:
        binary = find_prometheus(args.prometheus, out=out)
        out.write(f"Prometheus: {binary}\n")
        with _workdir(args.keep) as workdir:
            result = run_pipeline(args.bootstrap_servers, args.minutes * 60, binary, workdir, out)
            result.save(workdir / "results.json")
    report(result, out)
    dashboard = {**json.loads(DASHBOARD.read_text()), "panels": [p.panel for p in result.panels]}
    path = render(dashboard, result.panels, result.start, result.end, args.out)
    out.write(f"\n{path} ({path.stat().st_size // 1024} KiB)\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
