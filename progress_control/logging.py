"""structlog setup for the project's own entry points (CLI, sidecar, runtime processes).

Library code (the interceptor inside someone else's producer) never calls this: it logs through
stdlib ``logging`` and leaves the host's configuration alone.
"""

from __future__ import annotations

import logging
import sys

import structlog

__all__ = ["configure_logging"]


def configure_logging(level: str = "INFO", *, json: bool | None = None) -> None:
    """Route stdlib and structlog output through one renderer.

    ``json=None`` picks JSON lines when stderr is not a terminal (containers, CI) and a readable
    console format on a terminal.
    """
    use_json = not sys.stderr.isatty() if json is None else json
    shared: list[structlog.types.Processor] = [
        structlog.contextvars.merge_contextvars,
        structlog.stdlib.add_log_level,
        structlog.stdlib.add_logger_name,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
    ]
    renderer: structlog.types.Processor = (
        structlog.processors.JSONRenderer()
        if use_json
        else structlog.dev.ConsoleRenderer(colors=sys.stderr.isatty())
    )
    structlog.configure(
        processors=[
            *shared,
            structlog.processors.StackInfoRenderer(),
            structlog.stdlib.ProcessorFormatter.wrap_for_formatter,
        ],
        logger_factory=structlog.stdlib.LoggerFactory(),
        wrapper_class=structlog.stdlib.BoundLogger,
        cache_logger_on_first_use=True,
    )
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(
        structlog.stdlib.ProcessorFormatter(
            foreign_pre_chain=shared,
            processors=[
                structlog.stdlib.ProcessorFormatter.remove_processors_meta,
                # The console renderer prints tracebacks itself; JSON needs them as a string.
                *([structlog.processors.format_exc_info] if use_json else []),
                renderer,
            ],
        )
    )
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    # APScheduler (inside the interceptor) logs every job run at INFO.
    logging.getLogger("apscheduler").setLevel(max(logging.WARNING, root.level))
