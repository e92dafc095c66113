"""Where things are, for tests at any depth of the tests tree."""

from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
"""The repository's root."""
APPS = ROOT / "tests" / "apps"
"""The small apps tests run as processes."""
