"""A virtualenv with Quix Streams, for the Quix reader's tests and the engines benchmark, under
the project cache (``<cache>/quix/quixstreams-<version>``; installed from PyPI on first use,
never committed).

Quix Streams 3.28 pins ``confluent-kafka<2.13``, ``pydantic<2.14`` and
``pydantic-settings<2.16``, below this project's own pins, so it cannot share the test
virtualenv. The helper needs nothing of ours but the protocol and trust modules (stdlib plus
structlog), so the apps run there with this repository on ``PYTHONPATH``. The benchmark's app
imports nothing of ours.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from progress_control.dev.cache import fill_once
from progress_control.settings import default_cache_dir

__all__ = ["QUIX_VERSION", "quix_python"]

QUIX_VERSION = "3.28.1"
"""The Quix Streams release the reader helper is tested and the benchmark run against (the
current 3.x)."""

_PACKAGES = (f"quixstreams=={QUIX_VERSION}", "structlog>=26.1")
_COMPLETE = "COMPLETE"
_PIP_TIMEOUT_S = 900


def quix_python(cache_dir: Path | None = None) -> Path:
    """The Python of the Quix Streams virtualenv, creating it first if needed."""
    target = (cache_dir or default_cache_dir()) / "quix" / f"quixstreams-{QUIX_VERSION}"

    def build(staging: Path) -> None:
        venv = staging / "venv"
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
        result = subprocess.run(
            [
                str(venv / "bin" / "python"),
                *("-m", "pip", "install", "--quiet", "--disable-pip-version-check"),
                *_PACKAGES,
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
