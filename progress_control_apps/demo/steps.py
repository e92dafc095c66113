"""Progress display for the main job's long steps: a spinner with elapsed time on a terminal,
plain start/done lines otherwise (CI logs).

A step may report progress (``progress=``, e.g. megabytes fetched so far): on a terminal it is
shown beside the spinner; otherwise a line every :data:`PLAIN_PROGRESS_S` seconds, so a first run
that fetches jars for minutes is never one silent line.
"""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TextIO

__all__ = ["PLAIN_PROGRESS_S", "Steps"]

_SPINNER = "|/-\\"
PLAIN_PROGRESS_S = 15.0
"""Without a terminal: how often a long step prints a progress line."""


class Steps:
    """Numbered steps: ``with steps.step("Starting the broker"): ...``."""

    def __init__(self, out: TextIO, total: int) -> None:
        self._out = out
        self._total = total
        self._number = 0
        self._tty = out.isatty()

    @contextmanager
    def step(self, title: str, progress: Callable[[], str | None] | None = None) -> Iterator[None]:
        """A step; ``progress`` (called from a display thread) describes how far it got."""
        self._number += 1
        label = f"[{self._number}/{self._total}] {title}"
        started = time.monotonic()
        stop = threading.Event()
        display = None
        if self._tty:
            display = threading.Thread(
                target=self._spin, args=(label, started, stop, progress), daemon=True
            )
        else:
            self._out.write(f"{label} ...\n")
            self._out.flush()
            if progress is not None:
                display = threading.Thread(
                    target=self._report, args=(label, started, stop, progress), daemon=True
                )
        if display is not None:
            display.start()
        try:
            yield
        except BaseException:
            self._finish(stop, display, f"{label} failed after {time.monotonic() - started:.1f}s")
            raise
        self._finish(stop, display, f"{label} done in {time.monotonic() - started:.1f}s")

    def _spin(
        self,
        label: str,
        started: float,
        stop: threading.Event,
        progress: Callable[[], str | None] | None,
    ) -> None:
        detail = None
        for tick, frame in enumerate(itertools.cycle(_SPINNER)):
            if stop.wait(0.2):
                return
            if progress is not None and tick % 5 == 0:  # once a second: progress may cost
                detail = _safe(progress)
            suffix = f"  {detail}" if detail else ""
            self._out.write(f"\r\033[K{label} {frame} {time.monotonic() - started:5.1f}s{suffix}")
            self._out.flush()

    def _report(
        self,
        label: str,
        started: float,
        stop: threading.Event,
        progress: Callable[[], str | None],
    ) -> None:
        while not stop.wait(PLAIN_PROGRESS_S):
            detail = _safe(progress)
            elapsed = time.monotonic() - started
            self._out.write(f"{label} ... {elapsed:.0f}s{f': {detail}' if detail else ''}\n")
            self._out.flush()

    def _finish(self, stop: threading.Event, display: threading.Thread | None, line: str) -> None:
        stop.set()
        if display is not None:
            display.join()
        if self._tty:
            self._out.write("\r\033[K")
        self._out.write(line + "\n")
        self._out.flush()


def _safe(progress: Callable[[], str | None]) -> str | None:
    try:
        return progress()
    except Exception:  # a display must never fail the step
        return None
