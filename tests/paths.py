"""Where things are, for tests at any depth of the tests tree."""

from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
"""The repository's root."""
APPS = ROOT / "harness"
"""The apps tests (and benches) run as processes."""
