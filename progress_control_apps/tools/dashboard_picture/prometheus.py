"""A Prometheus server on loopback, the chart's alert rules for it, and the run's processes."""

from __future__ import annotations

import contextlib
import importlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.parse
import urllib.request
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import IO, Any, TextIO

from progress_control.settings import default_cache_dir
from progress_control_apps.dev.ports import free_port
from progress_control_apps.tools.dashboard_picture.config import (
    CHART,
    SCRAPE_INTERVAL_S,
    TIMEOUT_S,
    DashboardPictureError,
)


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
        deadline = time.monotonic() + TIMEOUT_S
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


def wait_for_log(log: Path, pattern: re.Pattern[str], process: subprocess.Popen[bytes]) -> str:
    deadline = time.monotonic() + TIMEOUT_S
    while time.monotonic() < deadline:
        match = pattern.search(log.read_text(errors="replace"))
        if match:
            return match.group(1)
        if process.poll() is not None:
            break
        time.sleep(0.2)
    raise DashboardPictureError(f"{pattern.pattern!r} not logged; see {log}")
