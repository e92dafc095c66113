"""Where things are, for tests at any depth of the tests tree."""

import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
"""The repository's root."""
APPS = ROOT / "harness"
"""The apps tests (and benches) run as processes."""
PACKAGES: tuple[str, ...] = tuple(
    tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]["root_packages"]
)
"""Our top-level packages: the roots of ``./dev lint``'s layers contract."""
