"""A streams runtime app for the emit-on-change crash test (KAFKA-12508): a table of the input
(String keys and values) whose updates are written to the output. Every setting comes from
PROGRESS_CONTROL_RUNTIME_* env vars.

    python tables_app.py INPUT OUTPUT STORE MARKER_FILE

The first time the table forwards the value "B" while MARKER_FILE does not exist, the run
starts crashing: it creates MARKER_FILE, and from then on its updates never reach the output (as
if they were still in the producer's buffers when the process died) and it commits no input
offsets. At the first commit after an update of the key "end", once that commit has sent and
flushed its changelog writes, it kills itself with SIGKILL before committing the input offsets:
KAFKA-12508's window, where the changelog holds updates that downstream never received, caused by
uncommitted input. Both go through the runtime's fault-injection point, ``App``'s
``before_offset_commit``.
"""

import faulthandler
import os
import signal
import sys
from pathlib import Path

from progress_control.logging import configure_logging
from streams_runtime import App, StreamsBuilder
from streams_runtime.processing.commit_strategy import OffsetCommitHook
from streams_runtime.serdes import String


class CrashGate:
    """The filter between the table and the output that decides when this run crashes."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker
        self.crashing = False
        self.crash_at_commit = False

    def __call__(self, key: str, value: str | None) -> bool:
        if not self.crashing and value == "B" and not self.marker.exists():
            self.marker.write_text("crashing\n")
            self.crashing = True
        if self.crashing and key == "end":
            self.crash_at_commit = True
        return not self.crashing


def crash_at_commit(gate: CrashGate) -> OffsetCommitHook:
    """The app's ``before_offset_commit``: once the changelog writes of a commit are flushed,
    die before its input offsets are committed (and, while crashing, never commit them)."""

    def before_offset_commit() -> bool:
        if gate.crash_at_commit:
            os.kill(os.getpid(), signal.SIGKILL)  # the input offsets are never committed
        return not gate.crashing  # the crashing run never gets to commit its input

    return before_offset_commit


def table_updates(source: str, sink: str, store: str, gate: CrashGate) -> StreamsBuilder:
    builder = StreamsBuilder(default_key_serde=String(), default_value_serde=String())
    builder.table(source, store_name=store).to_stream().filter(gate).to(sink)
    return builder


def main() -> None:
    source, sink, store, marker = sys.argv[1], sys.argv[2], sys.argv[3], Path(sys.argv[4])
    configure_logging("INFO", json=False)
    faulthandler.register(signal.SIGUSR1)  # stack dump on demand, for debugging hangs
    gate = CrashGate(marker)
    App(table_updates(source, sink, store, gate), before_offset_commit=crash_at_commit(gate)).run()


if __name__ == "__main__":
    main()
