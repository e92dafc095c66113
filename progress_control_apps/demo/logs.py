"""Where the main job's logs go: files under the output directory, so the terminal shows only the
steps, the report and real errors.

``<output>/logs/``:

- ``spark.log``: the Spark driver's log4j2 output (the JVM is configured with a log4j2 file, see
  :func:`progress_control_apps.spark.session.spark_session`);
- ``demo.log``: Python logging at INFO and above: the runtime, the interceptor, and librdkafka's
  logs of the clients the demo configures with a ``logger``;
- ``native-stderr.log``: what native code writes to the process's stderr: the JVM launcher's
  notices and librdkafka's default logger of the clients that have no Python logger (the streams
  runtime's, whose settings take strings only).

The terminal keeps Python errors (``--log-level`` lowers that) and tracebacks; librdkafka and py4j
records never go there, whatever their level.
"""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from progress_control.logging import configure_logging, log_formatter, parse_log_level

__all__ = ["DEMO_LOG", "NATIVE_STDERR_LOG", "SPARK_LOG", "DemoLogs", "demo_logging"]

SPARK_LOG = "spark.log"
DEMO_LOG = "demo.log"
NATIVE_STDERR_LOG = "native-stderr.log"

_FILE_ONLY = ("py4j",)
"""Loggers whose records go to the file only (plus every ``*librdkafka`` logger)."""


@dataclass(frozen=True)
class DemoLogs:
    """The log directory of one run."""

    directory: Path

    @property
    def spark(self) -> Path:
        return self.directory / SPARK_LOG

    @property
    def python(self) -> Path:
        return self.directory / DEMO_LOG

    @property
    def native_stderr(self) -> Path:
        return self.directory / NATIVE_STDERR_LOG


class _NotOnTerminal(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        name = record.name
        return not (name.endswith("librdkafka") or name.split(".")[0] in _FILE_ONLY)


@contextmanager
def demo_logging(directory: Path, terminal_level: str | None = None) -> Iterator[DemoLogs]:
    """Route logs to files under ``directory`` for the duration of the block.

    Python logging: everything from INFO to ``demo.log``; the terminal (stderr) only from
    ``terminal_level`` (default ERROR), never librdkafka's or py4j's records. File descriptor 2
    goes to ``native-stderr.log``, so a JVM started or a librdkafka client created inside the
    block writes there; ``sys.stderr`` (Python's own messages, tracebacks) stays the terminal.
    """
    logs = DemoLogs(directory)
    directory.mkdir(parents=True, exist_ok=True)
    level = logging.getLevelName(parse_log_level(terminal_level or "ERROR"))
    assert isinstance(level, int)

    sys.stderr.flush()
    terminal_fd = os.dup(2)
    previous_stderr = sys.stderr
    terminal = os.fdopen(os.dup(terminal_fd), "w", buffering=1, encoding="utf-8")
    with logs.native_stderr.open("ab") as native:
        os.dup2(native.fileno(), 2)
    sys.stderr = terminal

    configure_logging(logging.getLevelName(min(level, logging.INFO)), stream=terminal)
    root = logging.getLogger()
    on_terminal = root.handlers[0]
    on_terminal.setLevel(level)
    on_terminal.addFilter(_NotOnTerminal())
    to_file = logging.FileHandler(logs.python, encoding="utf-8")
    to_file.setFormatter(log_formatter(json=False))
    root.addHandler(to_file)
    try:
        yield logs
    finally:
        for handler in root.handlers:
            handler.flush()
        root.removeHandler(to_file)
        to_file.close()
        sys.stderr = previous_stderr
        if isinstance(on_terminal, logging.StreamHandler):
            on_terminal.setStream(previous_stderr)
        terminal.close()
        os.dup2(terminal_fd, 2)
        os.close(terminal_fd)
