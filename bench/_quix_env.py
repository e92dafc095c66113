"""Quix Streams for the engines benchmark, in a virtualenv of its own under the project cache
(``<cache>/bench/quixstreams-<version>``; installed from PyPI on first use, never committed)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from progress_control.dev.cache import fill_once
from progress_control.settings import default_cache_dir

__all__ = ["QUIX_VERSION", "quix_python"]

QUIX_VERSION = "3.28.1"
_COMPLETE = "COMPLETE"
_PIP_TIMEOUT_S = 900


def quix_python(cache_dir: Path | None = None) -> Path:
    """The Python of a virtualenv with ``quixstreams==QUIX_VERSION``, creating it first if
    needed."""
    target = (cache_dir or default_cache_dir()) / "bench" / f"quixstreams-{QUIX_VERSION}"

    def build(staging: Path) -> None:
        venv = staging / "venv"
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
        result = subprocess.run(
            [
                str(venv / "bin" / "python"),
                "-m",
                "pip",
                "install",
                "--quiet",
                "--disable-pip-version-check",
                f"quixstreams=={QUIX_VERSION}",
            ],
            capture_output=True,
            text=True,
            timeout=_PIP_TIMEOUT_S,
            check=False,
        )
        if result.returncode != 0:
            raise RuntimeError(f"installing Quix Streams failed:\n{result.stderr[-3000:]}")
        (staging / _COMPLETE).write_text("")

    built = fill_once(
        target,
        lambda directory: (directory / _COMPLETE).is_file(),
        build,
        f"Installing Quix Streams {QUIX_VERSION} into {target} (first run only)...",
    )
    return built / "venv" / "bin" / "python"
