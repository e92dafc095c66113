"""The Flink companion (``readers/flink``, a module of ``readers/pom.xml`` on
``progress-control-core``) for the tests: build it with Maven into the jar cache (main and test
classes, the example job among the latter; once per source change) and run its example job,
``TickedSessionsJob``, on a Flink MiniCluster in one JVM. Its unit tests run under Maven with
the other modules' (``mvn -f readers/pom.xml test``, in .ci/run).
"""

from __future__ import annotations

import queue
import threading
from pathlib import Path

from progress_control_apps.dev.jars import build_maven_project
from tests.jvms import start_driven_jvm, stop_child

__all__ = ["FLINK_DIR", "TickedSessionsJob", "build_flink_companion"]

READERS_DIR = Path(__file__).resolve().parents[2] / "readers"
FLINK_DIR = READERS_DIR / "flink"
JOB_CLASS = "dev.progresscontrol.flink.example.TickedSessionsJob"


def build_flink_companion() -> Path:
    """The directory of the companion's jars, its example job's and their dependencies'."""
    return build_maven_project(
        READERS_DIR, "readers", "the Flink companion and its example job", module=FLINK_DIR.name
    )


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
        pipelines = [f"{mode}={topic}" for mode, topic in topics.items()]
        self._process, self._log = start_driven_jvm(
            jars,
            JOB_CLASS,
            bootstrap,
            str(gap_ms),
            str(parallelism),
            *pipelines,
            max_heap="768m",
            log_path=self.log_path,
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
        stop_child(self._process, self._log)

    def __enter__(self) -> TickedSessionsJob:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()
