"""Hypothesis profiles: the same search on every ordinary run, random exploration on demand.

- ``ci``, the default (``./dev test``, CI): derandomized. Each property test draws the same
  examples on every run and every machine (Hypothesis seeds them from the test itself), with no
  example database, so a run goes red only on code or tests that changed. Each test runs its own
  ``max_examples`` (Hypothesis' default 100 where it names none).
- ``explore`` (``./dev test-explore``; ``PROGRESS_CONTROL_HYPOTHESIS_PROFILE=explore``): random,
  :data:`EXPLORE_FACTOR` times as many examples, failures kept in ``.hypothesis/`` and replayed
  first. A failure it finds becomes an explicit ``@example`` on its test, so every ordinary run
  checks it from then on.

Neither has a deadline: a loaded machine is slow, not wrong (timed assertions do not belong in
tests).
"""

from __future__ import annotations

import os

from hypothesis import settings

__all__ = ["EXPLORE_FACTOR", "PROFILE", "PROFILE_ENV", "examples"]

PROFILE_ENV = "PROGRESS_CONTROL_HYPOTHESIS_PROFILE"
EXPLORE_FACTOR = 10
"""How many times a test's examples the exploring run draws."""

settings.register_profile("ci", derandomize=True, database=None, deadline=None, print_blob=True)
settings.register_profile(
    "explore", max_examples=100 * EXPLORE_FACTOR, deadline=None, print_blob=True
)

PROFILE = os.environ.get(PROFILE_ENV, "ci")
if PROFILE not in {"ci", "explore"}:
    raise ValueError(f"{PROFILE_ENV} must be ci or explore, not {PROFILE!r}")
settings.load_profile(PROFILE)


def examples(ci: int) -> int:
    """A test's ``max_examples``: ``ci`` in the ``ci`` profile, :data:`EXPLORE_FACTOR` times as
    many when exploring."""
    return ci * EXPLORE_FACTOR if PROFILE == "explore" else ci
