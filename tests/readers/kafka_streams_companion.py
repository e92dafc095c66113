"""The Kafka Streams companion (``readers/kafka-streams``, a module of ``readers/pom.xml`` on
``progress-control-core``) for the broker tests: build it with Maven into the jar cache (main
and test classes, the example app among the latter; once per source change) and run its example
app, :class:`TickedWindowsApp`, in one JVM for any number of applications.
"""

from __future__ import annotations

import queue
import threading
import time
from pathlib import Path

from progress_control_apps.dev.jars import build_maven_project
from tests.jvms import start_driven_jvm, stop_child

__all__ = ["COMPANION_DIR", "CompanionApps", "build_companion"]

READERS_DIR = Path(__file__).resolve().parents[2] / "readers"
COMPANION_DIR = READERS_DIR / "kafka-streams"
APP_CLASS = "dev.progresscontrol.kafka.streams.example.TickedWindowsApp"


def build_companion() -> Path:
    """The directory of the companion's jars, its example app's and their dependencies'."""
    return build_maven_project(
        READERS_DIR,
        "readers",
        "the Kafka Streams companion and its example app",
        module=COMPANION_DIR.name,
    )


class CompanionApps:
    """One JVM running the example app once per spec (a dict of its properties); the apps stop
    when this closes. Its log (Kafka's WARN and above) goes to a file named in every error."""

    def __init__(self, jars: Path, work_dir: Path, specs: list[dict[str, str]]) -> None:
        work_dir.mkdir(parents=True, exist_ok=True)
        files = []
        for spec in specs:
            path = work_dir / f"{spec['application.id']}.properties"
            path.write_text("".join(f"{key}={value}\n" for key, value in spec.items()))
            files.append(str(path))
        self.log_path = work_dir / "kafka-streams.log"
        self._process, self._log = start_driven_jvm(
            jars, APP_CLASS, *files, max_heap="384m", log_path=self.log_path
        )
        self.failures: dict[str, str] = {}
        self._started: queue.Queue[str] = queue.Queue()
        threading.Thread(target=self._read_answers, daemon=True).start()

    def _read_answers(self) -> None:
        assert self._process.stdout is not None
        for line in self._process.stdout:
            verb, _, rest = line.strip().partition(" ")
            if verb == "failed":
                app_id, _, message = rest.partition(" ")
                self.failures[app_id] = message
            elif verb == "started":
                self._started.put(rest)

    def check(self) -> None:
        """Raise if an application stopped on an error (e.g. a user function saw a tick)."""
        if self.failures:
            raise AssertionError(f"Kafka Streams failed: {self.failures} (log: {self.log_path})")
        if self._process.poll() is not None:
            raise AssertionError(
                f"the Kafka Streams JVM exited ({self._process.poll()}), log: {self.log_path}"
            )

    def wait_started(self, app_ids: list[str], timeout_s: float = 120.0) -> None:
        """Wait until every application in ``app_ids`` is RUNNING."""
        waiting = set(app_ids)
        deadline = time.monotonic() + timeout_s
        while waiting:
            self.check()
            try:
                waiting.discard(self._started.get(timeout=0.2))
            except queue.Empty:
                if time.monotonic() > deadline:
                    raise AssertionError(
                        f"not RUNNING after {timeout_s}s: {sorted(waiting)} (log: {self.log_path})"
                    ) from None

    def close(self) -> None:
        stop_child(self._process, self._log)

    def __enter__(self) -> CompanionApps:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()
