"""Progress display for the main job's long steps: a spinner with elapsed time on a terminal,
plain start/done lines otherwise (CI logs)."""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TextIO

__all__ = ["Steps"]

_SPINNER = "|/-\\"


class Steps:
    """Numbered steps: ``with steps.step("Starting the broker"): ...``."""

    def __init__(self, out: TextIO, total: int) -> None:
        self._out = out
        self._total = total
        self._number = 0
        self._tty = out.isatty()

    @contextmanager
    def step(self, title: str) -> Iterator[None]:
        self._number += 1
        label = f"[{self._number}/{self._total}] {title}"
        started = time.monotonic()
        stop = threading.Event()
        spinner = None
        if self._tty:
            spinner = threading.Thread(target=self._spin, args=(label, started, stop), daemon=True)
            spinner.start()
        else:
            self._out.write(f"{label} ...\n")
            self._out.flush()
        try:
            yield
        except BaseException:
            self._finish(stop, spinner, f"{label} failed after {time.monotonic() - started:.1f}s")
            raise
        self._finish(stop, spinner, f"{label} done in {time.monotonic() - started:.1f}s")

    def _spin(self, label: str, started: float, stop: threading.Event) -> None:
        for frame in itertools.cycle(_SPINNER):
            if stop.wait(0.2):
                return
            self._out.write(f"\r{label} {frame} {time.monotonic() - started:5.1f}s")
            self._out.flush()

    def _finish(self, stop: threading.Event, spinner: threading.Thread | None, line: str) -> None:
        stop.set()
        if spinner is not None:
            spinner.join()
            self._out.write("\r\033[K")
        self._out.write(line + "\n")
        self._out.flush()
