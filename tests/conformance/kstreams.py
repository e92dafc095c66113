"""Kafka Streams itself, for the conformance suite: build the Java app in ``kstreams/`` with Maven
into the jar cache (once per source change; nothing is committed) and drive it from Python.

One JVM serves the whole test session: ``start(spec)`` runs a Kafka Streams application with the
topologies the spec names, ``stop(app_id)`` closes it; ``drive(spec, ...)`` runs them in Kafka
Streams' ``TopologyTestDriver`` instead, without a broker. The JVM's own log (Kafka's WARN and
above) goes to a file, named in every error.
"""

from __future__ import annotations

import queue
import threading
import time
from pathlib import Path

from progress_control_apps.dev.jars import build_maven_project
from tests.jvms import start_driven_jvm, stop_child

__all__ = ["KafkaStreamsApps", "build_conformance_app"]

SOURCE_DIR = Path(__file__).parent / "kstreams"


def build_conformance_app() -> Path:
    """The directory of the built app's jars (the app and its dependencies), building it with
    Maven first when the sources changed since the last build."""
    return build_maven_project(SOURCE_DIR, "conformance", "the Kafka Streams conformance app")


class KafkaStreamsApps:
    """A JVM running :mod:`kstreams`' ``ConformanceApp``; applications start and stop on
    command. Use as a context manager (the JVM exits when it is closed)."""

    def __init__(self, jars: Path, work_dir: Path) -> None:
        self._work_dir = work_dir
        work_dir.mkdir(parents=True, exist_ok=True)
        self.log_path = work_dir / "kafka-streams.log"
        self._process, self._log = start_driven_jvm(
            jars, "kpc.conformance.ConformanceApp", max_heap="512m", log_path=self.log_path
        )
        self._answers: queue.Queue[str] = queue.Queue()
        self.failures: dict[str, str] = {}
        self._reader = threading.Thread(target=self._read_answers, daemon=True)
        self._reader.start()

    def _read_answers(self) -> None:
        assert self._process.stdout is not None
        for line in self._process.stdout:
            verb, _, rest = line.strip().partition(" ")
            if verb == "failed":
                app_id, _, message = rest.partition(" ")
                self.failures[app_id] = message
            self._answers.put(line.strip())

    def _command(self, line: str) -> None:
        assert self._process.stdin is not None
        try:
            self._process.stdin.write(line + "\n")
            self._process.stdin.flush()
        except BrokenPipeError:
            raise RuntimeError(
                f"the Kafka Streams JVM exited ({self._process.poll()}): "
                f"{self.log_path.read_text()[-2000:]}"
            ) from None

    def _await(self, expected: str, app_id: str, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        while True:
            if app_id in self.failures:
                raise RuntimeError(
                    f"Kafka Streams app {app_id} failed: {self.failures[app_id]} "
                    f"(log: {self.log_path})"
                )
            try:
                answer = self._answers.get(timeout=0.2)
            except queue.Empty:
                if self._process.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(
                        f"no '{expected} {app_id}' from the Kafka Streams JVM "
                        f"(exit code {self._process.poll()}, log: {self.log_path})"
                    ) from None
                continue
            if answer == f"{expected} {app_id}":
                return

    def _spec_file(self, spec: dict[str, str]) -> Path:
        path = self._work_dir / f"{spec['application.id']}.properties"
        path.write_text("".join(f"{key}={value}\n" for key, value in spec.items()))
        return path

    def start(self, spec: dict[str, str], timeout_s: float = 120.0) -> None:
        """Start the application ``spec["application.id"]`` and wait until it is RUNNING."""
        app_id = spec["application.id"]
        self._command(f"start {self._spec_file(spec)}")
        self._await("started", app_id, timeout_s)

    def drive(
        self, spec: dict[str, str], inputs: Path, outputs: Path, timeout_s: float = 120.0
    ) -> None:
        """Run the spec's topologies in Kafka Streams' ``TopologyTestDriver`` on the records in
        ``inputs``; their outputs are in ``outputs`` once this returns (formats: the Java
        app's ``drive``)."""
        app_id = spec["application.id"]
        self._command(f"drive {self._spec_file(spec)} {inputs} {outputs}")
        self._await("driven", app_id, timeout_s)

    def check(self, app_id: str) -> None:
        """Raise if the application stopped on an error."""
        if app_id in self.failures:
            raise RuntimeError(
                f"Kafka Streams app {app_id} failed: {self.failures[app_id]} (log: {self.log_path})"
            )

    def stop(self, app_id: str, timeout_s: float = 60.0) -> None:
        self._command(f"stop {app_id}")
        self._await("stopped", app_id, timeout_s)

    def close(self) -> None:
        stop_child(self._process, self._log)

    def __enter__(self) -> KafkaStreamsApps:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()
