"""One conformance case in a runtime process of its own (settings from PROGRESS_CONTROL_RUNTIME_*
env variables): ``python -m tests.conformance.runtime_process CASE IN OUT GAP_MS``."""

from __future__ import annotations

import sys

from streams_runtime import App, SessionWindows, StreamsBuilder
from streams_runtime.serdes import String
from tests.conformance.topologies import build_runtime_case


def main() -> None:
    case, source, sink, gap_ms = sys.argv[1:5]
    builder = StreamsBuilder(default_key_serde=String(), default_value_serde=String())
    build_runtime_case(builder, case, {"in": source, "out": sink}, SessionWindows(int(gap_ms)))
    App(builder).run()


if __name__ == "__main__":
    main()
