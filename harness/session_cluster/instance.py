"""One runtime process of a session cluster: started as ``python -m harness.session_cluster
--instance`` in its slot's state dir, signalled (SIGKILL, SIGSTOP, SIGCONT, SIGTERM), its
metrics scraped."""

from __future__ import annotations

import signal
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path
from typing import Literal

from prometheus_client.parser import text_string_to_metric_families

from harness.session_cluster.config import ROOT, ClusterConfig, ClusterError

InstanceState = Literal["running", "paused", "killed", "stopped"]


class Instance:
    """One runtime process: slot ``slot`` (its state dir), start number ``generation``."""

    def __init__(self, config: ClusterConfig, slot: int, generation: int, workdir: Path) -> None:
        self.slot, self.generation = slot, generation
        self.name = f"i{slot}.{generation}"
        self.client_id = f"{config.application_id}-{self.name}"
        self.log_path = workdir / f"{self.name}.log"
        self._port_file = workdir / f"{self.name}.port"
        self._instance_id_file = workdir / f"state-{slot}" / config.application_id / "instance.id"
        self._log = self.log_path.open("ab")
        env = {
            **config.env(),
            "PROGRESS_CONTROL_RUNTIME_STATE_DIR": str(workdir / f"state-{slot}"),
            "PROGRESS_CONTROL_RUNTIME_CONSUMER__CLIENT_ID": self.client_id,
        }
        self.process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "harness.session_cluster",
                "--instance",
                config.source,
                config.sink,
                str(self._port_file),
            ],
            env=env,
            cwd=ROOT,
            stdout=subprocess.DEVNULL,
            stderr=self._log,
        )
        self.state: InstanceState = "running"
        self.last_metrics: dict[str, float] = {}

    @property
    def metrics_port(self) -> int | None:
        try:
            return int(self._port_file.read_text())
        except (OSError, ValueError):
            return None

    @property
    def runtime_instance_id(self) -> str | None:
        """The runtime's own instance id (kept in its state dir; its membership record's key,
        and its consumer's ``group.instance.id`` when it sets one); ``None`` until written."""
        try:
            return self._instance_id_file.read_text().strip() or None
        except OSError:
            return None

    def scrape(self) -> dict[str, float] | None:
        """Counter totals (``name{label=value,...}`` -> value) from ``/metrics``; ``None`` when
        not answering. The last answer is kept in :attr:`last_metrics`."""
        port = self.metrics_port
        if port is None or self.state != "running":
            return None
        try:
            url = f"http://127.0.0.1:{port}/metrics"
            with urllib.request.urlopen(url, timeout=5) as response:
                text = response.read().decode()
        except (OSError, urllib.error.URLError):
            return None
        found: dict[str, float] = {}
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                labels = ",".join(f"{k}={v}" for k, v in sorted(sample.labels.items()))
                found[f"{sample.name}{{{labels}}}"] = float(sample.value)
        self.last_metrics = found
        return found

    def total(self, name: str, **labels: str) -> float:
        """The sum of ``name`` over matching labels, from the last scrape."""
        wanted = [f"{k}={v}" for k, v in labels.items()]
        return sum(
            value
            for key, value in self.last_metrics.items()
            if key.startswith(name + "{") and all(w in key for w in wanted)
        )

    def check_alive(self) -> None:
        code = self.process.poll()
        if code is not None and self.state in ("running", "paused"):
            raise ClusterError(f"instance {self.name} exited with {code}: {self.log_tail()}")

    def log_tail(self, lines: int = 8) -> list[str]:
        text = self.log_path.read_text(errors="replace").splitlines()
        return [line[-400:] for line in text[-lines:]]

    def kill(self) -> None:
        """SIGKILL: nothing committed, nothing closed, metrics since the last scrape lost."""
        self.state = "killed"
        self.process.send_signal(signal.SIGKILL)
        self.process.wait(30)
        self._log.close()

    def pause(self) -> None:
        """SIGSTOP: the process, its heartbeats and its in-flight requests freeze."""
        self.process.send_signal(signal.SIGSTOP)
        self.state = "paused"

    def resume(self) -> None:
        self.process.send_signal(signal.SIGCONT)
        self.state = "running"

    def terminate(self) -> None:
        """SIGTERM: the app commits and leaves the group (wait with :meth:`wait_stopped`)."""
        if self.state == "paused":
            self.resume()
        self.state = "stopped"
        if self.process.poll() is None:
            self.process.terminate()

    def wait_stopped(self, timeout_s: float = 60.0) -> int:
        try:
            code = self.process.wait(timeout_s)
        except subprocess.TimeoutExpired:
            self.process.kill()
            code = self.process.wait(10)
        self._log.close()
        return code
