"""A streams runtime app for the operations tests (shutdown in every phase, health probes): a
table of the input (String keys and values, store ``STORE``) whose updates are written to the
output. Every setting comes from PROGRESS_CONTROL_RUNTIME_* env vars; the tests read its state
from ``/health/live`` and ``/health/ready`` on the metrics port.

    python ops_app.py INPUT OUTPUT STORE
"""

import faulthandler
import signal
import sys

from progress_control.logging import configure_logging
from streams_runtime import App, StreamsBuilder
from streams_runtime.serdes import String


def table_updates(source: str, sink: str, store: str) -> StreamsBuilder:
    builder = StreamsBuilder(default_key_serde=String(), default_value_serde=String())
    builder.table(source, store_name=store).to_stream().to(sink)
    return builder


def main() -> None:
    source, sink, store = sys.argv[1], sys.argv[2], sys.argv[3]
    configure_logging("INFO", json=False)
    faulthandler.register(signal.SIGUSR1)  # stack dump on demand, for debugging hangs
    App(table_updates(source, sink, store)).run()


if __name__ == "__main__":
    main()
