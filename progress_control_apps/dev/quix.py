"""A virtualenv with Quix Streams, for the Quix reader's tests and the engines benchmark, under
the project cache (``<cache>/quix/quixstreams-<version>-<requirements hash>``; installed from
PyPI on first use, never committed).

Quix Streams 3.28 pins ``confluent-kafka<2.13``, ``pydantic<2.14`` and
``pydantic-settings<2.16``: it cannot share the test virtualenv (the runtime needs
confluent-kafka 2.13.2), but it installs beside the core. The virtualenv is what
``pip install kafka-progress-control[quix]`` resolves: the core's requirements and the ``quix``
extra's, resolved together with Quix Streams at :data:`QUIX_VERSION` (so building it proves
that they resolve). The apps run there with this repository on ``PYTHONPATH``. The benchmark's
app imports nothing of ours.
"""

from __future__ import annotations

import hashlib
import subprocess
import sys
from importlib import metadata
from pathlib import Path

from progress_control.settings import default_cache_dir
from progress_control_apps.dev.cache import fill_once

__all__ = ["QUIX_VERSION", "quix_python", "quix_requirements"]

QUIX_VERSION = "3.28.1"
"""The Quix Streams release the reader helper is tested and the benchmark run against (the
current 3.x)."""

_COMPLETE = "COMPLETE"
_PIP_TIMEOUT_S = 900


def quix_requirements() -> list[str]:
    """What ``kafka-progress-control[quix]`` installs (the core's requirements and the extra's),
    with Quix Streams pinned to :data:`QUIX_VERSION`."""
    requirements = [f"quixstreams=={QUIX_VERSION}"]
    for requirement in metadata.requires("kafka-progress-control") or []:
        spec, _, marker = requirement.partition(";")
        if not marker or marker.replace(" ", "") == 'extra=="quix"':
            requirements.append(spec.strip())
    return requirements


def quix_python(cache_dir: Path | None = None) -> Path:
    """The Python of the Quix Streams virtualenv, creating it first if needed."""
    packages = quix_requirements()
    digest = hashlib.sha256("\n".join(packages).encode()).hexdigest()[:8]
    name = f"quixstreams-{QUIX_VERSION}-{digest}"
    target = (cache_dir or default_cache_dir()) / "quix" / name

    def build(staging: Path) -> None:
        venv = staging / "venv"
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
        result = subprocess.run(
            [
                str(venv / "bin" / "python"),
                *("-m", "pip", "install", "--quiet", "--disable-pip-version-check"),
                *packages,
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
