"""structlog setup for the project's own entry points (CLI, sidecar, runtime processes).

Library code (the interceptor inside someone else's producer) never calls this: it logs through
stdlib ``logging`` and leaves the host's configuration alone.

Structured fields: a JSON log line carries ``event``, ``level``, ``logger`` and ``timestamp``, plus
the record's own fields, which come from

- structlog loggers: ``structlog.get_logger().info("tick sent", topic=t, partition=p)``;
- stdlib loggers, ``extra``: ``logger.warning("tick failed", extra={"topic": t, "partition": p})``;
- stdlib loggers, a mapping as the only argument, which also keeps the message readable under any
  other logging setup: ``logger.warning("tick to %(topic)s[%(partition)d] failed",
  {"topic": t, "partition": p})``.

So ``{"event": "tick to clicks[3] failed", "topic": "clicks", "partition": 3, ...}``: a log
pipeline filters on ``topic`` instead of parsing the message. The console shows the message and
only the fields it does not already show (``tick to clicks[3] failed  code=_MSG_TIMED_OUT``).

The project's own log calls use the mapping form, with these field names where they apply:
``topic``, ``partition``, ``offset``, ``source``, ``reason``, ``task`` (``0_3``), ``store``,
``instance``, ``error`` (the exception's message, a string), ``code`` (a Kafka error's name);
counts and durations are named for what they count (``undelivered``, ``duration_s``).
``tests/test_logging.py`` checks every call in the packages keeps to the mapping form.
"""

from __future__ import annotations

import logging
import sys
import threading
import time
from collections.abc import Callable, Hashable, Mapping, MutableMapping
from typing import Any, TextIO

import structlog

__all__ = [
    "LOG_LEVELS",
    "OncePerKey",
    "RateLimitedKeys",
    "client_logger",
    "configure_logging",
    "log_formatter",
    "parse_log_level",
]

LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")
"""The level names ``--log-level`` and the ``*_LOG_LEVEL`` settings accept (any case)."""

_ALIASES = {"WARN": "WARNING", "FATAL": "CRITICAL"}


def parse_log_level(value: str) -> str:
    """``value`` as one of :data:`LOG_LEVELS`; :class:`ValueError` naming the choices if not."""
    name = value.strip().upper()
    name = _ALIASES.get(name, name)
    if name not in LOG_LEVELS:
        raise ValueError(f"invalid log level {value!r} (choose from {', '.join(LOG_LEVELS)})")
    return name


def _record_fields(*, repeat_shown: bool) -> structlog.types.Processor:
    """A stdlib record's mapping argument (``%(topic)s`` style) as fields of the event.

    Without ``repeat_shown`` (the console), a field the message already shows (``%(topic)s``)
    is not repeated after it; JSON carries every field.
    """

    def add(
        _logger: Any, _name: str, event_dict: MutableMapping[str, Any]
    ) -> MutableMapping[str, Any]:
        args = event_dict.pop("positional_args", None)
        if isinstance(args, Mapping):
            record = event_dict.get("_record")
            template = str(record.msg) if isinstance(record, logging.LogRecord) else ""
            for key, value in args.items():
                if not repeat_shown and f"%({key})" in template:
                    continue
                event_dict.setdefault(str(key), value)
        return event_dict

    return add


def _shared_processors() -> list[structlog.types.Processor]:
    return [
        structlog.contextvars.merge_contextvars,
        structlog.stdlib.add_log_level,
        structlog.stdlib.add_logger_name,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
    ]


def _foreign_pre_chain(*, json: bool) -> list[structlog.types.Processor]:
    # ExtraAdder: fields given with stdlib's ``extra=``.
    return [
        *_shared_processors(),
        structlog.stdlib.ExtraAdder(),
        _record_fields(repeat_shown=json),
    ]


def log_formatter(*, json: bool, colors: bool = False) -> logging.Formatter:
    """The formatter :func:`configure_logging` installs, for another handler (e.g. a log file):
    JSON lines, or the readable console format."""
    renderer: structlog.types.Processor = (
        structlog.processors.JSONRenderer(default=str)
        if json
        else structlog.dev.ConsoleRenderer(colors=colors)
    )
    return structlog.stdlib.ProcessorFormatter(
        foreign_pre_chain=_foreign_pre_chain(json=json),
        pass_foreign_args=True,  # for _record_fields
        processors=[
            structlog.stdlib.ProcessorFormatter.remove_processors_meta,
            # The console renderer prints tracebacks itself; JSON needs them as a string.
            *([structlog.processors.format_exc_info] if json else []),
            renderer,
        ],
    )


def configure_logging(
    level: str = "INFO", *, json: bool | None = None, stream: TextIO | None = None
) -> None:
    """Route stdlib and structlog output through one renderer, to ``stream`` (stderr).

    ``json=None`` picks JSON lines when the stream is not a terminal (containers, CI) and a
    readable console format on a terminal.
    """
    stream = stream or sys.stderr
    tty = stream.isatty()
    use_json = not tty if json is None else json
    structlog.configure(
        processors=[
            *_shared_processors(),
            structlog.processors.StackInfoRenderer(),
            structlog.stdlib.ProcessorFormatter.wrap_for_formatter,
        ],
        logger_factory=structlog.stdlib.LoggerFactory(),
        wrapper_class=structlog.stdlib.BoundLogger,
        cache_logger_on_first_use=True,
    )
    handler = logging.StreamHandler(stream)
    handler.setFormatter(log_formatter(json=use_json, colors=tty))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(parse_log_level(level))
    # APScheduler (inside the interceptor) logs every job run at INFO.
    logging.getLogger("apscheduler").setLevel(max(logging.WARNING, root.level))


class OncePerKey:
    """Which keys were seen already, so a warning is logged once per key (say, a source and a
    reason) and the rest are only counted; thread-safe. Keys may be chosen by whoever writes a
    topic (forged source ids), so at most ``limit`` are remembered: past that, none is new."""

    def __init__(self, limit: int = 1_000) -> None:
        self._limit = limit
        self._seen: set[Hashable] = set()
        self._lock = threading.Lock()

    def first(self, key: Hashable) -> bool:
        """True the first time ``key`` comes, while fewer than ``limit`` keys are remembered."""
        with self._lock:
            if key in self._seen or len(self._seen) >= self._limit:
                return False
            self._seen.add(key)
            return True

    def __len__(self) -> int:
        with self._lock:
            return len(self._seen)


class RateLimitedKeys:
    """Lets each key through at most once per ``interval_s`` and counts what it held back, so a
    line repeated by a retry loop (a client failing to connect every backoff) is logged once
    per interval with how many it stands for; thread-safe. At most ``limit`` keys are
    remembered: past that, unknown keys are held back (counted under none)."""

    def __init__(
        self,
        interval_s: float,
        limit: int = 1_000,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._interval_s = interval_s
        self._limit = limit
        self._clock = clock
        self._last: dict[Hashable, tuple[float, int]] = {}
        self._lock = threading.Lock()

    def admit(self, key: Hashable) -> int | None:
        """``None`` to hold the line back; else how many lines of ``key`` were held back since
        the last one let through (0 the first time)."""
        now = self._clock()
        with self._lock:
            last = self._last.get(key)
            if last is None:
                if len(self._last) >= self._limit:
                    return None
                self._last[key] = (now, 0)
                return 0
            at, held = last
            if now - at < self._interval_s:
                self._last[key] = (at, held + 1)
                return None
            self._last[key] = (now, 0)
            return held


# librdkafka's log facilities whose warning-or-worse lines are the same events it hands to
# error_cb: a broker connection's failure (FAIL) and the fatal error (FATAL).
_ERROR_CB_FACILITIES = frozenset({"FAIL", "FATAL"})


# Warnings librdkafka logs about a step it retries by itself while a coordinator starts (a
# broker that just started loads its transaction and group state): normal, so debug lines.
_TRANSIENT_RETRIES = ("Coordinator load in progress", "Coordinator not available")


class _TransientRetries(logging.Filter):
    """Turns librdkafka's warnings about a coordinator still loading, which it retries by
    itself (``GETPID ... Coordinator load in progress: retrying`` on a fresh broker), into
    debug lines, kept only where debug is on."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno < logging.WARNING or not isinstance(record.args, tuple):
            return True
        message = str(record.args[-1]) if record.args else ""
        if not message.endswith("retrying") or not any(t in message for t in _TRANSIENT_RETRIES):
            return True
        if not logging.getLogger(record.name).isEnabledFor(logging.DEBUG):
            return False
        record.levelno, record.levelname = logging.DEBUG, "DEBUG"
        return True


class _ErrorCallbackEchoes(logging.Filter):
    """Drops the librdkafka log lines that ``error_cb`` reports too, so each error is logged
    once, by ``error_cb`` (with its code and whether it is fatal)."""

    def filter(self, record: logging.LogRecord) -> bool:
        # confluent-kafka logs ``"%s [%s] %s", facility, client name, message``.
        facility = record.args[0] if isinstance(record.args, tuple) and record.args else None
        return not (record.levelno >= logging.WARNING and facility in _ERROR_CB_FACILITIES)


def client_logger(name: str) -> logging.Logger:
    """The stdlib logger ``name`` for a librdkafka client's ``logger`` property, where the client
    also has an ``error_cb`` that logs: the log lines repeating an error ``error_cb`` reports are
    dropped. Lower-level lines (a FAIL at debug) and every other facility pass."""
    logger = logging.getLogger(name)
    for kind in (_ErrorCallbackEchoes, _TransientRetries):
        if not any(isinstance(f, kind) for f in logger.filters):
            logger.addFilter(kind())
    return logger
