"""A picture of the Helm chart's Grafana dashboard, drawn from a real run.

This is **not Grafana's own rendering**: no Grafana server can be had from the package
registries this project reaches (Debian does not package it, and its Go module is not to be
used), so the dashboard is drawn with matplotlib in Grafana's dark style. Everything it shows
is real, though:

1. A real Prometheus server: ``--prometheus`` when given, else ``prometheus`` on ``PATH``, else
   Debian's ``prometheus`` package, unpacked (``apt-get download`` and ``dpkg -x``: no service
   installed) into ``<cache>/tools/prometheus-deb`` the first time.
2. A real pipeline on a real broker (``--bootstrap-servers``, default ``127.0.0.1:19096``): the
   sidecar (``progress-control sidecar``, broker watch) on two topics; a producer app under the
   interceptor (``progress-control run -- python ...``) writing clicks to four partitions that
   go idle and busy again on a schedule, with one large burst, serving the interceptor's
   collector on its own ``/metrics``; a batch job without the interceptor writing orders twice,
   which only the sidecar ticks; and a streams runtime app (session-window counts of the
   clicks, suppressed until the sessions close) with ``metrics_port`` set, stopped for half a
   minute around the burst (SIGSTOP, then SIGCONT) so that the burst shows as lag.
3. Prometheus scrapes them every 5 s, each target labelled ``namespace`` and ``pod`` as the
   Prometheus Operator's ServiceMonitors label them, and evaluates the chart's own alert rules
   (``templates/prometheusrule.yaml``, rendered by ``helm template``).
4. Each panel's own queries (``helm/progress-control/files/dashboard.json``) go through
   Prometheus' ``query_range`` over the run, Grafana's variables substituted (``$namespace``:
   All), at a 5 s step; the panels are drawn where their ``gridPos`` puts them.
5. It prints, per panel query and per alert rule, how many series came back (and the alerts'
   states), so a query that names a missing metric or label shows as "no data". The run's
   topics (and the runtime's internal ones and group) are deleted at the end.

Run it (about 11 minutes with the default 10-minute pipeline; ``--keep DIR`` keeps the logs,
Prometheus' data and the query results, which ``--replay DIR/results.json`` draws again without
a run)::

    .venv/bin/python -m progress_control_apps.tools.dashboard_picture
    .venv/bin/python -m progress_control_apps.tools.dashboard_picture --minutes 3 --out /tmp/d.png
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import importlib
import json
import math
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse
import urllib.request
import uuid
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import IO, Any, TextIO

from progress_control.settings import default_cache_dir
from progress_control_apps.dev.ports import free_port

__all__ = ["find_prometheus", "main"]

ROOT = Path(__file__).resolve().parents[2]
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

_TIMEOUT_S = 30.0
_RANDOM = random.Random(40)  # noqa: S311 - made-up clicks, not secrets

# Grafana's dark theme (v10/v11) and its classic palette.
_CANVAS = "#111217"
_PANEL = "#181b1f"
_BORDER = "#2a2c31"
_TEXT = "#ccccdc"
_TEXT_WEAK = "#9a9aa6"
_GRID = "#25272c"
_PALETTE = (
    "#73bf69",
    "#f2cc0c",
    "#8ab8ff",
    "#ff780a",
    "#f2495c",
    "#5794f2",
    "#b877d9",
    "#705da0",
    "#37872d",
    "#fade2a",
)


class DashboardPictureError(RuntimeError):
    """A step of the run failed (the message says which, and where its log is)."""


# ---------------------------------------------------------------------------------------------
# Prometheus


def find_prometheus(explicit: str | None = None, *, out: TextIO = sys.stderr) -> Path:
    """A Prometheus server binary: ``explicit``, ``prometheus`` on ``PATH``, or Debian's package
    unpacked into the cache (fetched there when missing)."""
    if explicit:
        return Path(explicit)
    on_path = shutil.which("prometheus")
    if on_path:
        return Path(on_path)
    folder = default_cache_dir() / "tools" / "prometheus-deb"
    binary = folder / "root" / "usr" / "bin" / "prometheus"
    if binary.exists():
        return binary
    if shutil.which("apt-get") is None or shutil.which("dpkg") is None:
        raise DashboardPictureError(
            "no Prometheus server: pass --prometheus or put prometheus on PATH"
        )
    out.write(f"fetching Debian's prometheus package into {folder} (apt-get download)\n")
    folder.mkdir(parents=True, exist_ok=True)
    subprocess.run(["apt-get", "download", "prometheus"], cwd=folder, check=True)
    [deb] = sorted(folder.glob("prometheus_*.deb"))
    subprocess.run(["dpkg", "-x", str(deb), str(folder / "root")], check=True)
    return binary


def render_alert_rules() -> list[dict[str, Any]]:
    """The chart's PrometheusRule groups, as ``helm template`` renders them with the defaults."""
    from progress_control_apps.tools.helm import helm_binary

    yaml: Any = importlib.import_module("yaml")  # PyYAML ships no type stubs
    with tempfile.TemporaryDirectory(prefix="helm-home-") as home:
        env = {
            "PATH": "/usr/bin:/bin",
            "HOME": home,
            "HELM_CACHE_HOME": f"{home}/cache",
            "HELM_CONFIG_HOME": f"{home}/config",
            "HELM_DATA_HOME": f"{home}/data",
        }
        result = subprocess.run(
            [
                str(helm_binary()),
                "template",
                "pc",
                str(CHART),
                "--set",
                "metrics.prometheusRule.enabled=true",
                "--show-only",
                "templates/prometheusrule.yaml",
            ],
            env=env,
            capture_output=True,
            text=True,
            check=True,
        )
    rule: dict[str, Any] = yaml.safe_load(result.stdout)
    groups: list[dict[str, Any]] = rule["spec"]["groups"]
    return groups


class Prometheus:
    """A Prometheus server on loopback, scraping ``targets`` (job -> (port, labels))."""

    def __init__(
        self,
        binary: Path,
        workdir: Path,
        targets: Mapping[str, tuple[int, Mapping[str, str]]],
        rule_groups: Sequence[Mapping[str, Any]],
    ) -> None:
        self.port = free_port("127.0.0.1", 0, quiet=True)
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = workdir / "prometheus.log"
        rules = workdir / "rules.json"  # JSON is YAML: Prometheus reads it
        rules.write_text(json.dumps({"groups": list(rule_groups)}, indent=2))
        config = {
            "global": {
                "scrape_interval": f"{SCRAPE_INTERVAL_S}s",
                "scrape_timeout": f"{SCRAPE_INTERVAL_S - 1}s",
                "evaluation_interval": f"{SCRAPE_INTERVAL_S}s",
            },
            "rule_files": [str(rules)],
            "scrape_configs": [
                {
                    "job_name": job,
                    "static_configs": [{"targets": [f"127.0.0.1:{port}"], "labels": dict(labels)}],
                }
                for job, (port, labels) in targets.items()
            ],
        }
        self.config = workdir / "prometheus.json"
        self.config.write_text(json.dumps(config, indent=2))
        self._command = [
            str(binary),
            f"--config.file={self.config}",
            f"--storage.tsdb.path={workdir / 'tsdb'}",
            f"--web.listen-address=127.0.0.1:{self.port}",
        ]
        self.process: subprocess.Popen[bytes] | None = None

    def start(self, processes: Processes) -> None:
        self.process = processes.start("prometheus", self._command, self.log)
        deadline = time.monotonic() + _TIMEOUT_S
        while time.monotonic() < deadline:
            with (
                contextlib.suppress(OSError),
                urllib.request.urlopen(f"{self.url}/-/ready", timeout=2) as answer,  # noqa: S310 - http on loopback
            ):
                if answer.status == 200:
                    return
            if self.process.poll() is not None:
                break
            time.sleep(0.3)
        raise DashboardPictureError(f"Prometheus did not get ready; see {self.log}")

    def api(self, path: str, **params: str) -> Any:
        query = urllib.parse.urlencode(params)
        url = f"{self.url}/api/v1/{path}?{query}"
        with urllib.request.urlopen(url, timeout=60) as answer:  # noqa: S310 - http on loopback
            body: dict[str, Any] = json.loads(answer.read())
        if body.get("status") != "success":
            raise DashboardPictureError(f"Prometheus: {path} {params}: {body}")
        return body["data"]

    def query_range(self, expr: str, start: float, end: float, step: float) -> list[Any]:
        data = self.api(
            "query_range", query=expr, start=f"{start:.3f}", end=f"{end:.3f}", step=f"{step}"
        )
        result: list[Any] = data["result"]
        return result


# ---------------------------------------------------------------------------------------------
# processes


class Processes:
    """The processes this run started, each logging to its own file; stopped in reverse order."""

    def __init__(self) -> None:
        self._started: list[tuple[str, subprocess.Popen[bytes], IO[bytes]]] = []

    def start(
        self, name: str, command: Sequence[str], log: Path, env: Mapping[str, str] | None = None
    ) -> subprocess.Popen[bytes]:
        handle = log.open("wb")
        process = subprocess.Popen(
            list(command),
            stdin=subprocess.DEVNULL,
            stdout=handle,
            stderr=subprocess.STDOUT,
            env={**os.environ, **(env or {})},
            cwd=log.parent,
        )
        self._started.append((name, process, handle))
        return process

    def exited(self) -> list[str]:
        """Names of started processes that are no longer running."""
        return [name for name, process, _ in self._started if process.poll() is not None]

    def stop(self, *names: str) -> None:
        """SIGTERM (then SIGKILL after 20 s) to the named processes, or all of them."""
        chosen = [entry for entry in reversed(self._started) if not names or entry[0] in names]
        for _, process, _ in chosen:
            if process.poll() is None:
                process.send_signal(signal.SIGCONT)  # a stopped process acts on SIGTERM then
                process.send_signal(signal.SIGTERM)
        for _, process, handle in chosen:
            try:
                process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
            handle.close()
        self._started = [entry for entry in self._started if entry not in chosen]


def _wait_for_log(log: Path, pattern: re.Pattern[str], process: subprocess.Popen[bytes]) -> str:
    deadline = time.monotonic() + _TIMEOUT_S
    while time.monotonic() < deadline:
        match = pattern.search(log.read_text(errors="replace"))
        if match:
            return match.group(1)
        if process.poll() is not None:
            break
        time.sleep(0.2)
    raise DashboardPictureError(f"{pattern.pattern!r} not logged; see {log}")


# ---------------------------------------------------------------------------------------------
# the pipeline


@dataclass
class Topics:
    clicks: str
    orders: str
    sessions: str
    application_id: str

    @classmethod
    def fresh(cls) -> Topics:
        run = uuid.uuid4().hex[:8]
        return cls(f"clicks-{run}", f"orders-{run}", f"click-sessions-{run}", f"sessions-{run}")


def create_topics(bootstrap: str, topics: Topics) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.create_topics(
        [
            NewTopic(topics.clicks, num_partitions=CLICK_PARTITIONS, replication_factor=1),
            NewTopic(topics.orders, num_partitions=ORDER_PARTITIONS, replication_factor=1),
            NewTopic(topics.sessions, num_partitions=CLICK_PARTITIONS, replication_factor=1),
        ],
        operation_timeout=_TIMEOUT_S,
    )
    for future in futures.values():
        future.result(timeout=_TIMEOUT_S)


def delete_topics(bootstrap: str, topics: Topics) -> None:
    """The run's topics, the runtime's internal ones and its consumer group."""
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": bootstrap})
    ours = (topics.clicks, topics.orders, topics.sessions)
    names = [
        name
        for name in admin.list_topics(timeout=_TIMEOUT_S).topics
        if name in ours or name.startswith(f"{topics.application_id}-")
    ]
    futures = {
        **(admin.delete_topics(names, operation_timeout=_TIMEOUT_S) if names else {}),
        **admin.delete_consumer_groups([topics.application_id], request_timeout=_TIMEOUT_S),
    }
    for future in futures.values():
        with contextlib.suppress(Exception):  # best effort: a leftover is only disk
            future.result(timeout=_TIMEOUT_S)


def _role_command(role: str, *args: str) -> list[str]:
    return [sys.executable, "-m", "progress_control_apps.tools.dashboard_picture", role, *args]


def _progress_control_cli() -> str:
    beside = Path(sys.executable).with_name("progress-control")
    return str(beside) if beside.exists() else "progress-control"


@dataclass
class Pipeline:
    bootstrap: str
    duration_s: float
    workdir: Path
    topics: Topics = field(default_factory=Topics.fresh)
    sidecar_port: int = 0
    producer_port: int = 0
    runtime_port: int = 0

    def start_sidecar(self, processes: Processes) -> None:
        log = self.workdir / "sidecar.log"
        env = {
            "PROGRESS_CONTROL_KAFKA__BOOTSTRAP_SERVERS": self.bootstrap,
            "PROGRESS_CONTROL_TOPICS_INCLUDE": f"{self.topics.clicks},{self.topics.orders}",
            "PROGRESS_CONTROL_SOURCE_ID": SIDECAR_SOURCE,
            "PROGRESS_CONTROL_HTTP_PORT": "0",
            "PROGRESS_CONTROL_REPORT_LISTEN": "",
            "PROGRESS_CONTROL_LOG_FORMAT": "json",
        }
        process = processes.start("sidecar", [_progress_control_cli(), "sidecar"], log, env)
        port = _wait_for_log(log, re.compile(r"serving HTTP on port (\d+)"), process)
        self.sidecar_port = int(port)

    def choose_ports(self) -> None:
        """Ports for the apps' /metrics, chosen before Prometheus' config is written."""
        self.runtime_port = free_port("127.0.0.1", 0, quiet=True)
        self.producer_port = free_port("127.0.0.1", 0, quiet=True, avoid={self.runtime_port})

    def start_apps(self, processes: Processes) -> subprocess.Popen[bytes]:
        """The runtime (returned) and the producer under the interceptor."""
        runtime = processes.start(
            "runtime",
            _role_command(
                "_runtime",
                self.bootstrap,
                self.topics.clicks,
                self.topics.sessions,
                self.topics.application_id,
                str(self.runtime_port),
                str(self.workdir / "state"),
            ),
            self.workdir / "runtime.log",
        )
        env = {
            "PROGRESS_CONTROL_TOPICS_INCLUDE": self.topics.clicks,
            "PROGRESS_CONTROL_SOURCE_ID": PRODUCER_SOURCE,
        }
        command = [
            _progress_control_cli(),
            "run",
            "--",
            *_role_command(
                "_producer",
                self.bootstrap,
                self.topics.clicks,
                str(self.producer_port),
                str(self.duration_s),
            ),
        ]
        processes.start("producer", command, self.workdir / "producer.log", env)
        return runtime

    def targets(self) -> dict[str, tuple[int, dict[str, str]]]:
        """Jobs to scrape, labelled as a ServiceMonitor's targets are (before runtime ports)."""

        def labels(pod: str, container: str) -> dict[str, str]:
            return {"namespace": NAMESPACE, "pod": pod, "container": container}

        return {
            "progress-control-sidecar": (
                self.sidecar_port,
                labels(SIDECAR_POD, "progress-control"),
            ),
            "clicks-producer": (self.producer_port, labels(PRODUCER_POD, "app")),
            "click-sessions": (self.runtime_port, labels(RUNTIME_POD, "streams-runtime")),
        }

    def stall(
        self, runtime: subprocess.Popen[bytes], stop: threading.Event, started: float
    ) -> None:
        """:data:`STALL_S` around the burst: SIGSTOP the runtime, then SIGCONT it."""
        pause, resume = (started + BURST_AT * self.duration_s + at for at in STALL_S)
        if stop.wait(max(0.0, pause - time.monotonic())) or runtime.poll() is not None:
            return
        runtime.send_signal(signal.SIGSTOP)
        try:
            stop.wait(max(0.0, resume - time.monotonic()))
        finally:
            runtime.send_signal(signal.SIGCONT)

    def write_orders(self, stop: threading.Event, started: float) -> None:
        """The batch job: plain confluent-kafka (no interceptor), twice; only the sidecar ticks
        its partitions once it is gone."""
        from confluent_kafka import Producer

        for at in ORDER_BATCHES_AT:
            if stop.wait(max(0.0, started + at * self.duration_s - time.monotonic())):
                return
            producer = Producer({"bootstrap.servers": self.bootstrap, "linger.ms": 20})
            for i in range(ORDER_BATCH_RECORDS):
                producer.produce(
                    self.topics.orders,
                    value=json.dumps({"order": i, "amount": _RANDOM.randint(1, 500)}).encode(),
                    key=f"customer-{_RANDOM.randrange(100)}".encode(),
                    partition=i % ORDER_PARTITIONS,
                )
                producer.poll(0)
            producer.flush(_TIMEOUT_S)


# ---------------------------------------------------------------------------------------------
# the apps (run in their own processes)


def _producer_app(bootstrap: str, topic: str, port: int, duration_s: float) -> None:
    """Clicks on the schedule of :data:`PARTITION_PLAN`, under ``progress-control run``."""
    from confluent_kafka import Producer
    from prometheus_client import REGISTRY, start_http_server

    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    collector_of = getattr(producer, "progress_collector", None)
    collector = collector_of() if collector_of is not None else None
    if collector is None:
        raise SystemExit("the producer has no progress control: run it under progress-control run")
    REGISTRY.register(collector)
    start_http_server(port, addr="127.0.0.1")
    stopping = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stopping.set())
    started = time.monotonic()
    owed = dict.fromkeys(range(CLICK_PARTITIONS), 0.0)
    burst_done = False
    tick_s = 0.1
    n = 0

    def click(partition: int) -> None:
        nonlocal n
        n += 1
        user = f"user-{_RANDOM.randrange(USERS)}"
        value = json.dumps({"user": user, "page": f"/p/{n % 17}"}).encode()
        while True:
            try:
                producer.produce(topic, value=value, key=user.encode(), partition=partition)
                return
            except BufferError:
                producer.poll(0.05)

    last = started
    while not stopping.is_set():
        now = time.monotonic()
        fraction, since_last, last = (now - started) / duration_s, now - last, now
        if fraction >= 1.0:
            break
        for partition, rate, spans in PARTITION_PLAN:
            if any(start <= fraction < end for start, end in spans):
                owed[partition] += rate * since_last
                while owed[partition] >= 1.0:
                    owed[partition] -= 1.0
                    click(partition)
        if not burst_done and fraction >= BURST_AT:
            burst_done = True
            for i in range(BURST_RECORDS):
                click(i % 2)
        producer.poll(tick_s)
    producer.flush(_TIMEOUT_S)
    stopping.wait()  # keep /metrics (and the ticks) up until the run stops this process
    producer.close()


def _runtime_app(
    bootstrap: str, source: str, sink: str, application_id: str, port: str, *, state_dir: str
) -> None:
    """Session-window click counts per user, suppressed until each session closes."""
    from progress_control.logging import configure_logging
    from streams_runtime import App, SessionWindows, StreamsBuilder, until_window_closes
    from streams_runtime.serdes import Json, String

    configure_logging("INFO", json=True)
    builder = StreamsBuilder()
    (
        builder.stream(source, key_serde=String(), value_serde=Json())
        .group_by_key()
        .windowed_by(SessionWindows(gap_ms=SESSION_GAP_MS))
        .count()
        .suppress(until_window_closes())
        .to_stream()
        .map(lambda w, count: (w.key, {"start": w.start, "end": w.end, "clicks": count}))
        .to(sink, key_serde=String(), value_serde=Json())
    )
    App(
        builder,
        application_id=application_id,
        bootstrap_servers=bootstrap,
        metrics_port=int(port),
        state_dir=state_dir,
    ).run()


# ---------------------------------------------------------------------------------------------
# the dashboard's queries


@dataclass(frozen=True)
class Series:
    legend: str
    times: list[float]
    values: list[float]


@dataclass(frozen=True)
class TargetResult:
    ref_id: str
    expr: str
    series: list[Series]


@dataclass(frozen=True)
class PanelResult:
    panel: dict[str, Any]
    targets: list[TargetResult]

    @property
    def series(self) -> list[Series]:
        return [s for target in self.targets for s in target.series]


def grafana_variables(dashboard: Mapping[str, Any], step_s: float) -> dict[str, str]:
    """Values for the dashboard's template variables (each query variable at All) and for
    Grafana's built-in interval variables."""
    values = {
        "__interval": f"{int(step_s)}s",
        "__rate_interval": f"{int(max(4 * SCRAPE_INTERVAL_S, step_s + SCRAPE_INTERVAL_S))}s",
    }
    for variable in dashboard.get("templating", {}).get("list", []):
        if variable.get("type") in {"query", "custom"}:
            values[variable["name"]] = variable.get("allValue") or ".*"
    return values


def substitute(expr: str, variables: Mapping[str, str]) -> str:
    """``$name`` and ``${name}`` replaced as Grafana does (longest names first)."""
    for name in sorted(variables, key=len, reverse=True):
        expr = expr.replace(f"${{{name}}}", variables[name]).replace(f"${name}", variables[name])
    return expr


def _legend(template: str, labels: Mapping[str, str]) -> str:
    if not template:
        inner = ", ".join(f'{k}="{v}"' for k, v in sorted(labels.items()))
        return f"{{{inner}}}"
    return re.sub(r"\{\{\s*(\w+)\s*\}\}", lambda m: labels.get(m.group(1), ""), template)


def query_panels(
    prometheus: Prometheus, dashboard: Mapping[str, Any], start: float, end: float
) -> list[PanelResult]:
    step = float(SCRAPE_INTERVAL_S)
    variables = grafana_variables(dashboard, step)
    results = []
    for panel in dashboard["panels"]:
        targets = []
        for target in panel.get("targets", []):
            expr = substitute(target["expr"], variables)
            series = [
                Series(
                    _legend(target.get("legendFormat", ""), item["metric"]),
                    [float(t) for t, _ in item["values"]],
                    [float(v) for _, v in item["values"]],
                )
                for item in prometheus.query_range(expr, start, end, step)
            ]
            targets.append(TargetResult(target.get("refId", "?"), expr, series))
        results.append(PanelResult(panel, targets))
    return results


_LABEL_VALUES = re.compile(r"^\s*label_values\(\s*(?P<match>.+?)\s*,\s*(?P<label>\w+)\s*\)\s*$")


def query_variables(
    prometheus: Prometheus, dashboard: Mapping[str, Any], start: float, end: float
) -> dict[str, list[str]]:
    """The values each ``label_values(...)`` template variable would offer over the run."""
    found = {}
    for variable in dashboard.get("templating", {}).get("list", []):
        match = _LABEL_VALUES.match(str(variable.get("query", "")))
        if variable.get("type") == "query" and match:
            found[variable["name"]] = prometheus.api(
                f"label/{match['label']}/values",
                **{"match[]": match["match"], "start": f"{start:.3f}", "end": f"{end:.3f}"},
            )
    return found


@dataclass(frozen=True)
class AlertResult:
    name: str
    expr: str
    operands: list[tuple[str, int]]
    """Each side of the rule's ``and``, its comparison left out, and how many series it had."""
    states: list[str]
    """Alert states seen over the run (``ALERTS``): pending, firing."""
    final_state: str
    health: str


_COMPARISON = re.compile(r"\s*(?:==|!=|>=|<=|>|<)\s*-?\d+(?:\.\d+)?(?=\s|$)")


def query_alerts(prometheus: Prometheus, start: float, end: float) -> list[AlertResult]:
    """Each loaded alert rule: its operands' series over the run, and its states."""
    step = float(SCRAPE_INTERVAL_S)
    results = []
    for group in prometheus.api("rules")["groups"]:
        for rule in group["rules"]:
            if rule.get("type") != "alerting":
                continue
            operands = []
            for part in re.split(r"\s+and\s+", rule["query"]):
                operand = _COMPARISON.sub("", part).strip()
                operands.append((operand, len(prometheus.query_range(operand, start, end, step))))
            history = prometheus.query_range(
                f'ALERTS{{alertname="{rule["name"]}"}}', start, end, step
            )
            states = sorted({item["metric"].get("alertstate", "?") for item in history})
            results.append(
                AlertResult(
                    rule["name"],
                    rule["query"],
                    operands,
                    states,
                    rule.get("state", "?"),
                    rule.get("health", "?"),
                )
            )
    return results


def report(result: RunResult, out: TextIO) -> None:
    panels, alerts = result.panels, result.alerts
    out.write("\nTemplate variables (label_values over the run):\n")
    for name, values in result.variables.items():
        out.write(f"  ${name}: {', '.join(values) if values else 'NO VALUES'}\n")
    out.write("\nPanels (each query over the run):\n")
    for panel in panels:
        out.write(f"  {panel.panel['title']}\n")
        for target in panel.targets:
            if not target.series:
                out.write(f"    {target.ref_id}: NO DATA  {target.expr}\n")
                continue
            peak = max((v for s in target.series for v in s.values if math.isfinite(v)), default=0)
            legends = ", ".join(s.legend for s in target.series)
            out.write(
                f"    {target.ref_id}: {len(target.series)} series, max {peak:.4g}: {legends}\n"
            )
    out.write("\nAlert rules (the chart's PrometheusRule, evaluated by Prometheus):\n")
    for alert in alerts:
        seen = ", ".join(alert.states) or "never pending or firing"
        out.write(f"  {alert.name}: {alert.final_state} at the end ({seen}; {alert.health})\n")
        for operand, count in alert.operands:
            out.write(
                f"    {count} series: {operand}\n" if count else f"    NO SERIES: {operand}\n"
            )


# ---------------------------------------------------------------------------------------------
# the picture


def _format_value(value: float, unit: str) -> str:
    """An axis label as Grafana writes it for ``unit`` (``s``, ``ops``, else ``short``)."""
    if unit == "s":
        magnitude = abs(value)
        if magnitude == 0:
            return "0 s"
        for limit, divisor, name in (
            (1e-3, 1e-6, "µs"),
            (1.0, 1e-3, "ms"),
            (60.0, 1.0, "s"),
            (3600.0, 60.0, "min"),
            (86400.0, 3600.0, "hour"),
            (31536000.0, 86400.0, "day"),
        ):
            if magnitude < limit:
                return f"{value / divisor:.3g} {name}"
        return f"{value / 31536000.0:.3g} year"
    scaled, suffix = value, ""
    for divisor, name in ((1e9, " Bil"), (1e6, " Mil"), (1e3, " K")):
        if abs(value) >= divisor:
            scaled, suffix = value / divisor, name
            break
    text = f"{scaled:.3g}{suffix}"
    return f"{text} ops/s" if unit == "ops" else text


@dataclass(frozen=True)
class _Canvas:
    """Pixel geometry of the picture: Grafana's grid is 24 columns of 30 px rows, 8 px apart."""

    fig: Any
    width: float
    height: float
    margin: float = 16
    header: float = 96
    row: float = 30
    gap: float = 8

    @property
    def column(self) -> float:
        return (self.width - 2 * self.margin - 23 * self.gap) / 24

    def box(self, left: float, top: float, width: float, height: float) -> tuple[float, ...]:
        """Figure coordinates of a box given in pixels from the top left."""
        return (
            left / self.width,
            1 - (top + height) / self.height,
            width / self.width,
            height / self.height,
        )

    def rectangle(self, left: float, top: float, width: float, height: float, face: str) -> None:
        from matplotlib.patches import Rectangle

        x, y, w, h = self.box(left, top, width, height)
        self.fig.patches.append(
            Rectangle(
                (x, y),
                w,
                h,
                transform=self.fig.transFigure,
                facecolor=face,
                edgecolor=_BORDER,
                linewidth=1,
                zorder=-10,
            )
        )

    def text(self, left: float, top: float, text: str, **style: Any) -> Any:
        """Text whose baseline-centre line is ``top`` pixels down; returns its right edge."""
        artist = self.fig.text(left / self.width, 1 - top / self.height, text, va="center", **style)
        extent = artist.get_window_extent(renderer=self.fig.canvas.get_renderer())
        return left + extent.width * self.width / self.fig.bbox.width


def _draw_header(canvas: _Canvas, title: str, start: float, end: float) -> None:
    """Breadcrumb and title, the two variables at All, the absolute time range."""
    right = canvas.text(canvas.margin, 22, "Home  /  Dashboards  /  ", color=_TEXT_WEAK, size=10)
    canvas.text(right, 22, title, color=_TEXT, size=10, weight="bold")
    fmt = "%Y-%m-%d %H:%M:%S"
    span = (
        f"{datetime.fromtimestamp(start, UTC).strftime(fmt)} to "
        f"{datetime.fromtimestamp(end, UTC).strftime(fmt)} UTC"
    )
    canvas.fig.text(
        1 - canvas.margin / canvas.width,
        1 - 22 / canvas.height,
        span,
        color=_TEXT,
        size=9,
        ha="right",
        va="center",
    )
    x = canvas.margin
    for label, value in (("Data source", "Prometheus"), ("Namespace", "All")):
        for text, face in ((label, "#22252b"), (value, _CANVAS)):
            right = canvas.text(x + 10, 58, text, color=_TEXT, size=9)
            canvas.rectangle(x, 44, right + 10 - x, 28, face)
            x = right + 10
        x += 8


def _draw_panel(canvas: _Canvas, result: PanelResult, start: float, end: float) -> None:
    """One time series panel where its ``gridPos`` puts it: title, axes, lines, legend."""
    import matplotlib.dates as mdates
    from matplotlib.ticker import FuncFormatter, MaxNLocator

    panel = result.panel
    grid = panel["gridPos"]
    left = canvas.margin + grid["x"] * (canvas.column + canvas.gap)
    top = canvas.header + grid["y"] * (canvas.row + canvas.gap)
    width = grid["w"] * canvas.column + (grid["w"] - 1) * canvas.gap
    height = grid["h"] * canvas.row + (grid["h"] - 1) * canvas.gap
    canvas.rectangle(left, top, width, height, _PANEL)
    canvas.text(left + 10, top + 16, panel["title"], color=_TEXT, size=10)
    unit = panel.get("fieldConfig", {}).get("defaults", {}).get("unit", "short")
    series = result.series
    rows = _legend_rows(series, width)
    axis_px = 84 if unit == "ops" else 58
    plot_left, plot_right = left + axis_px, left + width - 14
    plot_top, plot_bottom = top + 34, top + height - 24 - (20 * rows + 4 if series else 0)
    ax = canvas.fig.add_axes(
        canvas.box(plot_left, plot_top, plot_right - plot_left, plot_bottom - plot_top)
    )
    ax.set_facecolor(_PANEL)
    ax.patch.set_alpha(0)
    for spine in ax.spines.values():
        spine.set_visible(False)
    ax.grid(True, color=_GRID, linewidth=1)
    ax.set_axisbelow(True)
    ax.tick_params(colors=_TEXT_WEAK, labelsize=8, length=0, pad=6)
    if not series:
        ax.set_xticks([])
        ax.set_yticks([])
        ax.text(0.5, 0.5, "No data", transform=ax.transAxes, ha="center", va="center",
                color=_TEXT_WEAK, size=13)  # fmt: skip
        return
    ax.set_xlim(_date(start), _date(end))
    every = _minute_step(end - start)
    ax.xaxis.set_major_locator(
        mdates.MinuteLocator(byminute=range(0, 60, every), tz=UTC)  # type: ignore[no-untyped-call]
    )
    ax.xaxis.set_major_formatter(mdates.DateFormatter("%H:%M", tz=UTC))  # type: ignore[no-untyped-call]
    ax.yaxis.set_major_locator(MaxNLocator(nbins=5, steps=[1, 2, 2.5, 5, 10]))
    ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _pos: _format_value(v, unit)))
    finite: list[float] = []
    for index, s in enumerate(series):
        times, values = _with_gaps(s.times, s.values)
        color = _PALETTE[index % len(_PALETTE)]
        ax.plot([_date(t) for t in times], values, color=color, linewidth=1.2, label=s.legend)
        finite += [v for v in values if math.isfinite(v)]
    if finite and min(finite) >= 0:
        ax.set_ylim(bottom=0, top=max(finite) * 1.1 if max(finite) > 0 else 1)
    # Grafana's legend flows in rows; matplotlib fills columns: hand it the items column by column.
    ncol = math.ceil(len(series) / rows)
    handles, labels = ax.get_legend_handles_labels()
    order = [r * ncol + c for c in range(ncol) for r in range(rows) if r * ncol + c < len(series)]
    legend = ax.legend(
        [handles[i] for i in order],
        [labels[i] for i in order],
        loc="upper left",
        bbox_to_anchor=(
            -(axis_px - 10) / (plot_right - plot_left),
            -22 / (plot_bottom - plot_top),
        ),
        ncol=ncol,
        frameon=False,
        fontsize=8,
        handlelength=1.4,
        handletextpad=0.5,
        columnspacing=1.8,
        borderaxespad=0,
    )
    for text in legend.get_texts():
        text.set_color(_TEXT)
    for line in legend.get_lines():
        line.set_linewidth(3)


def render(
    dashboard: Mapping[str, Any],
    panels: Sequence[PanelResult],
    start: float,
    end: float,
    path: Path,
) -> Path:
    """The dashboard as Grafana lays it out, in its dark theme, as a 256-colour PNG."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    width = 1600.0
    probe = _Canvas(None, width, 0)
    rows = max(p["gridPos"]["y"] + p["gridPos"]["h"] for p in dashboard["panels"])
    height = probe.header + rows * (probe.row + probe.gap) - probe.gap + probe.margin
    dpi = 100
    plt.rcParams["font.family"] = "DejaVu Sans"
    fig = plt.figure(figsize=(width / dpi, height / dpi), dpi=dpi, facecolor=_CANVAS)
    canvas = _Canvas(fig, width, height)
    _draw_header(canvas, dashboard["title"], start, end)
    for result in panels:
        _draw_panel(canvas, result, start, end)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=dpi, facecolor=_CANVAS)
    plt.close(fig)
    _quantize(path)
    return path


def _date(t: float) -> float:
    import matplotlib.dates as mdates

    return float(mdates.date2num(datetime.fromtimestamp(t, UTC)))  # type: ignore[no-untyped-call]


def _minute_step(span_s: float) -> int:
    minutes = span_s / 60
    return next((step for step in (1, 2, 5, 10, 15, 30) if minutes / step <= 8), 60)


def _legend_rows(series: Sequence[Series], width_px: float) -> int:
    rows, used = 1, 0.0
    for s in series:
        item = len(s.legend) * 5.6 + 44
        if used and used + item > width_px - 20:
            rows, used = rows + 1, 0.0
        used += item
    return rows


def _with_gaps(times: Sequence[float], values: Sequence[float]) -> tuple[list[float], list[float]]:
    """A NaN where two samples are more than two steps apart, so the line breaks there."""
    out_t: list[float] = []
    out_v: list[float] = []
    for t, v in zip(times, values, strict=True):
        if out_t and t - out_t[-1] > 2 * SCRAPE_INTERVAL_S:
            out_t.append(out_t[-1] + SCRAPE_INTERVAL_S)
            out_v.append(math.nan)
        out_t.append(t)
        out_v.append(v)
    return out_t, out_v


def _quantize(path: Path) -> None:
    """A 256-colour PNG: the picture is flat colours and thin lines."""
    from PIL import Image

    with Image.open(path) as image:
        small = image.convert("RGB").quantize(colors=256, method=Image.Quantize.MEDIANCUT)
    small.save(path, optimize=True)


# ---------------------------------------------------------------------------------------------
# the run


@dataclass(frozen=True)
class RunResult:
    start: float
    end: float
    panels: list[PanelResult]
    alerts: list[AlertResult]
    variables: dict[str, list[str]] = field(default_factory=dict)

    def save(self, path: Path) -> None:
        path.write_text(json.dumps(dataclasses.asdict(self)))

    @classmethod
    def load(cls, path: Path) -> RunResult:
        data = json.loads(path.read_text())
        panels = [
            PanelResult(
                p["panel"],
                [
                    TargetResult(t["ref_id"], t["expr"], [Series(**s) for s in t["series"]])
                    for t in p["targets"]
                ],
            )
            for p in data["panels"]
        ]
        alerts = [AlertResult(**{**a, "operands": [tuple(o) for o in a["operands"]]})
                  for a in data["alerts"]]  # fmt: skip
        return cls(data["start"], data["end"], panels, alerts, data.get("variables", {}))


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
        _producer_app(bootstrap, topic, int(port), float(duration))
        return 0
    if argv and argv[0] == "_runtime":
        _runtime_app(*argv[1:6], state_dir=argv[6])
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
