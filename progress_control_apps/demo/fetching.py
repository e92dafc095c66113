"""First-run jar fetches of the main job, as steps that show how far they got."""

from __future__ import annotations

import os
from pathlib import Path

from progress_control.settings import default_cache_dir
from progress_control_apps.dev.jars import JarSet

__all__ = ["MavenDownloads", "jars_cached"]


def jars_cached(jar_set: JarSet, cache_dir: Path | None = None) -> bool:
    """Whether ``jar_set`` looks fetched already (its manifest exists; the fetch itself still
    verifies every jar)."""
    directory = (cache_dir or default_cache_dir()) / "jars" / jar_set.directory_name
    return (directory / "MANIFEST.json").is_file()


class MavenDownloads:
    """Progress of a Maven fetch: how much the local Maven repository grew since creation.

    Maven downloads every artifact into its local repository (``$PROGRESS_CONTROL_MAVEN_REPO``,
    else ``~/.m2/repository``) before it copies them into the jar cache at the very end, so the
    repository's growth is the download's progress.
    """

    def __init__(self) -> None:
        override = os.environ.get("PROGRESS_CONTROL_MAVEN_REPO")
        self._repo = Path(override) if override else Path.home() / ".m2" / "repository"
        self._start = _size(self._repo)

    def __call__(self) -> str:
        fetched = max(0, _size(self._repo) - self._start)
        return f"{fetched / 1e6:.0f} MB fetched from Maven Central"


def _size(directory: Path) -> int:
    total = 0
    for root, _dirs, files in os.walk(directory):
        for name in files:
            try:
                total += os.stat(os.path.join(root, name)).st_size
            except OSError:  # a file Maven renamed or removed meanwhile
                continue
    return total
