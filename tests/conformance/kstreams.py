"""Kafka Streams itself, for the conformance suite: build the Java app in ``kstreams/`` with Maven
into the jar cache (once per source change; nothing is committed) and drive it from Python.

One JVM serves the whole test session: ``start(spec)`` runs a Kafka Streams application with the
topologies the spec names, ``stop(app_id)`` closes it. The JVM's own log (Kafka's WARN and above)
goes to a file, named in every error.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import queue
import shutil
import subprocess
import threading
import time
from pathlib import Path
from typing import IO

from progress_control.dev.cache import fill_once
from progress_control.dev.jars import find_java, find_maven
from progress_control.settings import default_cache_dir

__all__ = ["KafkaStreamsApps", "build_conformance_app"]

SOURCE_DIR = Path(__file__).parent / "kstreams"
_MAVEN_TIMEOUT_S = 900
_COMPLETE = "COMPLETE"


def _source_digest() -> str:
    sha = hashlib.sha256()
    for path in sorted(p for p in SOURCE_DIR.rglob("*") if p.is_file()):
        sha.update(str(path.relative_to(SOURCE_DIR)).encode())
        sha.update(path.read_bytes())
    return sha.hexdigest()[:16]


def build_conformance_app(cache_dir: Path | None = None) -> Path:
    """The directory of the built app's jars (the app and its dependencies), building it with
    Maven first when the sources changed since the last build."""
    target = (cache_dir or default_cache_dir()) / "conformance" / f"kstreams-{_source_digest()}"

    def build(staging: Path) -> None:
        project = staging / "project"
        shutil.copytree(SOURCE_DIR, project)
        lib = staging / "lib"
        command = [
            str(find_maven()),
            "--batch-mode",
            "--no-transfer-progress",
            "--quiet",
            "-f",
            str(project / "pom.xml"),
            "package",
            "-DskipTests",
            "dependency:copy-dependencies",
            "-DincludeScope=runtime",
            f"-DoutputDirectory={lib}",
        ]
        local_repo = os.environ.get("PROGRESS_CONTROL_MAVEN_REPO")
        if local_repo:
            command.append(f"-Dmaven.repo.local={local_repo}")
        result = subprocess.run(
            command, capture_output=True, text=True, timeout=_MAVEN_TIMEOUT_S, check=False
        )
        if result.returncode != 0:
            tail = "\n".join((result.stdout + result.stderr).strip().splitlines()[-30:])
            raise RuntimeError(f"building the Kafka Streams conformance app failed:\n{tail}")
        for jar in (project / "target").glob("*.jar"):
            shutil.move(jar, lib / jar.name)
        shutil.rmtree(project)
        (staging / _COMPLETE).write_text("")

    built = fill_once(
        target,
        lambda directory: (directory / _COMPLETE).is_file(),
        build,
        f"Building the Kafka Streams conformance app into {target} (first run only)...",
    )
    return built / "lib"


class KafkaStreamsApps:
    """A JVM running :mod:`kstreams`' ``ConformanceApp``; applications start and stop on
    command. Use as a context manager (the JVM exits when it is closed)."""

    def __init__(self, jars: Path, work_dir: Path) -> None:
        self._work_dir = work_dir
        work_dir.mkdir(parents=True, exist_ok=True)
        self.log_path = work_dir / "kafka-streams.log"
        self._log: IO[str] = self.log_path.open("w")
        self._process = subprocess.Popen(
            [
                str(find_java()),
                "-Xmx512m",
                "-Dorg.slf4j.simpleLogger.defaultLogLevel=warn",
                "-cp",
                f"{jars}/*",
                "kpc.conformance.ConformanceApp",
            ],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._log,
            text=True,
            bufsize=1,
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

    def start(self, spec: dict[str, str], timeout_s: float = 120.0) -> None:
        """Start the application ``spec["application.id"]`` and wait until it is RUNNING."""
        app_id = spec["application.id"]
        path = self._work_dir / f"{app_id}.properties"
        path.write_text("".join(f"{key}={value}\n" for key, value in spec.items()))
        self._command(f"start {path}")
        self._await("started", app_id, timeout_s)

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
        try:
            if self._process.stdin is not None and not self._process.stdin.closed:
                with contextlib.suppress(BrokenPipeError):
                    self._process.stdin.close()
            self._process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self._process.kill()
            self._process.wait()
        finally:
            self._log.close()

    def __enter__(self) -> KafkaStreamsApps:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()
