"""The runtime's fixed cost, in log lines a user (and ``bench/engines.py``) can read:

- ``first record processed``, once per thread, with ``since_start_s``: seconds from the
  process's start (imports, topic checks, group join and restore included) to the first record
  (or control record) processed;
- ``input drained``, each time every input partition of the thread's tasks has been read to its
  end with nothing buffered after records were processed, with ``committed`` (whether the thread
  committed then, :mod:`~streams_runtime.processing.commit_schedule`) and
  ``since_last_record_s``: seconds from the last record processed to this line (so, when
  committed, to the end of that commit). INFO the first time (the backlog found at start-up is
  done), DEBUG after (a live input drains after nearly every fetch).

Kafka Streams has no counterpart; its nearest are ``KafkaStreams``' state-transition lines.
"""

from __future__ import annotations

import logging
import os
import time
from pathlib import Path

__all__ = ["Milestones", "process_started_at"]

logger = logging.getLogger(__name__)

_IMPORTED_AT = time.time()


def _process_started_at() -> float:
    try:
        # Field 22 of /proc/self/stat, the start in clock ticks after boot; the command name
        # (field 2, in parentheses) may hold spaces, so count from its closing parenthesis.
        fields = Path("/proc/self/stat").read_text().rsplit(")", 1)[1].split()
        ticks = int(fields[19])
        age = time.clock_gettime(time.CLOCK_BOOTTIME) - ticks / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError, AttributeError):
        return _IMPORTED_AT
    return time.time() - age


_STARTED_AT = _process_started_at()


def process_started_at() -> float:
    """The wall-clock time this process started: from ``/proc`` on Linux (to a clock tick,
    10 ms); elsewhere, when the runtime was imported."""
    return _STARTED_AT


class Milestones:
    """One stream thread's milestones; times are its monotonic clock."""

    def __init__(self) -> None:
        self._first_logged = False
        self._drains = 0
        self.last_record_at: float | None = None
        """When records were last processed."""
        self.undrained = False
        """Whether records were processed since the input last drained."""

    def processed(self, records: int, now: float) -> None:
        """``records`` were processed in the loop turn ending at ``now``."""
        if not records:
            return
        self.last_record_at = now
        self.undrained = True
        if not self._first_logged:
            self._first_logged = True
            since_start_s = round(time.time() - _STARTED_AT, 3)
            logger.info(
                "first record processed, %(since_start_s).2f s after the process started",
                {"since_start_s": since_start_s},
            )

    def drained(self, now: float, *, committed: bool) -> None:
        """The input drained (after :meth:`processed`), and was ``committed`` by ``now``."""
        self.undrained = False
        self._drains += 1
        since_last_record_s = round(now - (self.last_record_at or now), 3)
        logger.log(
            logging.INFO if self._drains == 1 else logging.DEBUG,
            "input drained%(how)s, %(since_last_record_s).2f s after its last record was processed",
            {
                "how": "; committed" if committed else "",
                "since_last_record_s": since_last_record_s,
                "committed": committed,
            },
        )
