"""The Flink companion (``readers/flink``) for the tests: build it with Maven into the jar cache
(main and test classes, the example job among the latter; once per source change), run its unit
tests with Maven (once per source change), and run its example job, ``TickedSessionsJob``, on a
Flink MiniCluster in one JVM.
"""

from __future__ import annotations

import contextlib
import hashlib
import queue
import shutil
import subprocess
import threading
from pathlib import Path
from typing import IO

from progress_control.dev.jars import build_maven_project, find_java, find_maven
from progress_control.settings import default_cache_dir

__all__ = ["FLINK_DIR", "TickedSessionsJob", "build_flink_companion", "run_unit_tests"]

FLINK_DIR = Path(__file__).resolve().parents[2] / "readers" / "flink"
JOB_CLASS = "dev.progresscontrol.flink.example.TickedSessionsJob"
_MAVEN_TIMEOUT_S = 900


def build_flink_companion() -> Path:
    """The directory of the companion's jars, its example job's and their dependencies'."""
    return build_maven_project(FLINK_DIR, "readers", "the Flink companion and its example job")


def _sources_digest() -> str:
    sha = hashlib.sha256()
    files = (p for p in FLINK_DIR.rglob("*") if "target" not in p.relative_to(FLINK_DIR).parts)
    for path in sorted(p for p in files if p.is_file()):
        sha.update(str(path.relative_to(FLINK_DIR)).encode())
        sha.update(path.read_bytes())
    return sha.hexdigest()[:16]


def run_unit_tests(work_dir: Path) -> str:
    """Run the companion's JUnit tests (``mvn test``) on a copy of its sources, unless these
    very sources passed before (a stamp in the jar cache); return Surefire's summary lines."""
    stamp = default_cache_dir() / "readers" / f"flink-unit-tests-{_sources_digest()}.passed"
    if stamp.is_file():
        return stamp.read_text()
    project = work_dir / "flink"
    shutil.copytree(FLINK_DIR, project, ignore=shutil.ignore_patterns("target"))
    command = [str(find_maven()), "--batch-mode", "--no-transfer-progress", "-f"]
    command += [str(project / "pom.xml"), "test"]
    result = subprocess.run(
        command, capture_output=True, text=True, timeout=_MAVEN_TIMEOUT_S, check=False
    )
    output = result.stdout + result.stderr
    if result.returncode != 0:
        tail = "\n".join(output.strip().splitlines()[-40:])
        raise AssertionError(f"the Flink companion's unit tests failed:\n{tail}")
    summary = "\n".join(line for line in output.splitlines() if "Tests run:" in line)
    stamp.parent.mkdir(parents=True, exist_ok=True)
    stamp.write_text(summary)
    return summary


class TickedSessionsJob:
    """A JVM running the example job on a MiniCluster: one pipeline per ``mode -> topic``, each
    printing ``session <mode> <user>=<first>,<last>,<count>`` per closed session window. The job
    is cancelled when this closes. The JVM's log (Flink's WARN and above) goes to a file named in
    every error."""

    def __init__(
        self,
        jars: Path,
        work_dir: Path,
        *,
        bootstrap: str,
        gap_ms: int,
        parallelism: int,
        topics: dict[str, str],
    ) -> None:
        work_dir.mkdir(parents=True, exist_ok=True)
        self.log_path = work_dir / "flink.log"
        self._log: IO[str] = self.log_path.open("w")
        pipelines = [f"{mode}={topic}" for mode, topic in topics.items()]
        self._process = subprocess.Popen(
            [
                str(find_java()),
                "-Xmx768m",
                "-Dorg.slf4j.simpleLogger.defaultLogLevel=warn",
                "-cp",
                f"{jars}/*",
                JOB_CLASS,
                bootstrap,
                str(gap_ms),
                str(parallelism),
                *pipelines,
            ],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._log,
            text=True,
            bufsize=1,
        )
        self.sessions: dict[str, set[str]] = {mode: set() for mode in topics}
        self.failure: str | None = None
        self.started = False
        self._lines: queue.Queue[str] = queue.Queue()
        threading.Thread(target=self._read_lines, daemon=True).start()

    def _read_lines(self) -> None:
        assert self._process.stdout is not None
        for line in self._process.stdout:
            self._lines.put(line.strip())

    def poll(self) -> None:
        """Take in what the job printed so far; raise if it failed or its JVM exited."""
        while True:
            try:
                line = self._lines.get_nowait()
            except queue.Empty:
                break
            verb, _, rest = line.partition(" ")
            if verb == "session":
                mode, _, session = rest.partition(" ")
                self.sessions[mode].add(session)
            elif verb == "started":
                self.started = True
            elif verb == "failed":
                self.failure = rest
        if self.failure is not None:
            raise AssertionError(f"the Flink job failed: {self.failure} (log: {self.log_path})")
        if self._process.poll() is not None:
            raise AssertionError(
                f"the Flink JVM exited ({self._process.poll()}): "
                f"{self.log_path.read_text()[-3000:]}"
            )

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

    def __enter__(self) -> TickedSessionsJob:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()
