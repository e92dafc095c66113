"""docs/contributing.md's code map names every module of ours, and only modules that exist
(issue 41): a newcomer finds each file's home there."""

from __future__ import annotations

import re
from pathlib import Path

from tests.paths import PACKAGES, ROOT

# Files every package has, or that say nothing about a concern of their own.
_SKIPPED = {"__init__.py", "__main__.py", "py.typed"}


def _map_sections() -> dict[str, str]:
    """The code map's text per top-level package (its bullet and the bullets under it)."""
    text = (ROOT / "docs" / "contributing.md").read_text()
    code_map = text.split("## Code map", 1)[1].split("\n## ", 1)[0]
    sections: dict[str, str] = {}
    current = None
    for line in code_map.splitlines():
        top = re.match(r"- \*\*`([a-z_]+)/`\*\*", line)
        if top:
            current = top[1]
            sections[current] = ""
        elif current is not None:
            sections[current] += line + "\n"
    return sections


def _modules(package: str) -> list[Path]:
    return sorted(
        path.relative_to(ROOT / package)
        for path in (ROOT / package).rglob("*.py")
        if path.name not in _SKIPPED and "__pycache__" not in path.parts
    )


def test_the_code_map_names_every_module() -> None:
    sections = _map_sections()
    missing = []
    for package in PACKAGES:
        section = sections.get(package, "")
        for module in _modules(package):
            names = [f"`{part}/`" for part in module.parts[:-1]] + [module.name]
            if not all(name in section for name in names):
                missing.append(f"{package}/{module}")
    assert not missing, f"not in docs/contributing.md's code map: {missing}"


def test_the_code_map_names_nothing_that_is_gone() -> None:
    sections = _map_sections()
    stale = []
    for package in PACKAGES:
        existing = {path.name for path in _modules(package)}
        for name in re.findall(r"`([a-z_0-9]+\.py)`", sections.get(package, "")):
            if name in _SKIPPED:
                continue
            if name not in existing:
                stale.append(f"{package}: {name}")
    assert not stale, f"in the code map but not in the tree: {stale}"
