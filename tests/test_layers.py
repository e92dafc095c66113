"""The layers contract of ``./dev lint`` (``[tool.importlinter]`` in pyproject.toml) holds, and
fails on an upward import: shown on a copy of the tree with one added (issue 41)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

from tests.paths import PACKAGES, ROOT


def _lint_imports(root: Path) -> subprocess.CompletedProcess[str]:
    command = Path(sys.executable).with_name("lint-imports")
    return subprocess.run(
        [str(command), "--no-cache"],
        cwd=root,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


def test_the_tree_keeps_its_layers() -> None:
    result = _lint_imports(ROOT)
    assert result.returncode == 0, result.stdout


def test_an_upward_import_breaks_the_contract(tmp_path: Path) -> None:
    shutil.copy(ROOT / "pyproject.toml", tmp_path)
    ignore = shutil.ignore_patterns("__pycache__", "*.so")
    for package in PACKAGES:
        shutil.copytree(ROOT / package, tmp_path / package, ignore=ignore)
    with (tmp_path / "progress_control" / "trust.py").open("a") as module:
        module.write("\nimport streams_runtime.app  # the foundation importing a component\n")
    result = _lint_imports(tmp_path)
    assert result.returncode != 0
    assert "progress_control.trust -> streams_runtime.app" in result.stdout
