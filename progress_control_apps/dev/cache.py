"""Fill a cache directory entry once, safely across processes: build it in a staging directory
under an exclusive file lock, then rename it into place."""

from __future__ import annotations

import fcntl
import shutil
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

__all__ = ["fill_once"]


def fill_once(
    target: Path,
    is_complete: Callable[[Path], bool],
    build: Callable[[Path], None],
    announce: str | None = None,
) -> Path:
    """Return ``target``, first building it with ``build(staging_dir)`` unless ``is_complete``.

    An incomplete or damaged ``target`` is removed and built again; ``announce`` is printed to
    stderr before a build (long steps deserve a word).
    """
    if is_complete(target):
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    with (target.parent / f".{target.name}.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if is_complete(target):  # another process built it while we waited
            return target
        if target.exists():
            shutil.rmtree(target)
        if announce:
            print(announce, file=sys.stderr, flush=True)
        staging = Path(tempfile.mkdtemp(prefix=f".{target.name}-", dir=target.parent))
        try:
            build(staging)
            staging.rename(target)
        finally:
            shutil.rmtree(staging, ignore_errors=True)
    return target
