"""The code blocks of the Markdown pages, and what each one's marker says to do with it.

A marker is an HTML comment on the last non-blank line before a block's opening fence (MkDocs
renders nothing for it)::

    <!-- example: run; topics: page-views; apps: page-views-app -->

The kind comes first (:data:`KINDS`); options follow, separated by ``;``, each ``name: values``
with space-separated values (:data:`OPTIONS`). The convention, for authors, is in
docs/contributing.md#examples-are-tests.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

__all__ = [
    "KINDS",
    "MUST_BE_MARKED",
    "OPTIONS",
    "Block",
    "MarkerError",
    "blocks_of",
    "pages",
]

KINDS = frozenset({"run", "test", "fragment", "shell", "output", "illustrative"})
"""``run``: executed as a user runs it; ``test``: a test module a user runs with pytest (its
``test_*`` functions called); ``fragment``: part of a program (compiled, its imports run,
executed with ``given`` names); ``shell``: its commands checked, not run; ``output``: the
standard output of the page's previous ``run`` block; ``illustrative``: not checked."""

OPTIONS: dict[str, frozenset[str]] = {
    "run": frozenset({"driver", "topics", "absent", "apps", "sequence", "requires"}),
    "test": frozenset({"requires"}),
    "fragment": frozenset({"given", "requires"}),
    "shell": frozenset(),
    "output": frozenset(),
    "illustrative": frozenset(),
}
"""The options each kind takes."""

MUST_BE_MARKED = frozenset({"python", "py", "bash", "sh", "shell", "console"})
"""Languages a reader runs: their blocks need a marker. Others (diagrams, YAML, Java, ...) are
illustrative unless marked."""

_FENCE = re.compile(r"^(?P<indent>[ \t]*)(?P<fence>`{3,}|~{3,})(?P<info>[^`]*)$")
_MARKER = re.compile(r"^\s*<!--\s*example:\s*(?P<body>.*?)\s*-->\s*$")


class MarkerError(ValueError):
    """A marker that does not parse (unknown kind or option)."""


@dataclass(frozen=True)
class Block:
    """One fenced code block of a page."""

    page: str
    """The page, relative to the repository (``docs/runtime/queries.md``)."""
    line: int
    """The line of the opening fence (1-based)."""
    language: str
    code: str
    kind: str | None
    """The marker's kind, ``None`` when unmarked."""
    options: dict[str, tuple[str, ...]] = field(default_factory=dict)

    @property
    def where(self) -> str:
        return f"{self.page}:{self.line}"

    @property
    def effective_kind(self) -> str | None:
        """The kind to act on: the marker's; unmarked blocks in a language nobody runs are
        illustrative; unmarked runnable ones have none (an error)."""
        if self.kind is not None:
            return self.kind
        return None if self.language in MUST_BE_MARKED else "illustrative"


def parse_marker(body: str, where: str) -> tuple[str, dict[str, tuple[str, ...]]]:
    """``run; topics: a b`` -> ``("run", {"topics": ("a", "b")})``."""
    kind, *rest = [part.strip() for part in body.split(";")]
    if kind not in KINDS:
        raise MarkerError(f"{where}: unknown example kind {kind!r} (one of {sorted(KINDS)})")
    options: dict[str, tuple[str, ...]] = {}
    for part in rest:
        if not part:
            continue
        name, colon, values = part.partition(":")
        name = name.strip()
        if not colon or name not in OPTIONS[kind]:
            raise MarkerError(
                f"{where}: {kind!r} takes no option {part!r} (options: {sorted(OPTIONS[kind])})"
            )
        options[name] = tuple(values.split())
    return kind, options


def blocks_of(path: Path, root: Path) -> list[Block]:
    """Every fenced block of the page at ``path``, with its marker."""
    page = path.relative_to(root).as_posix()
    lines = path.read_text(encoding="utf-8").splitlines()
    blocks: list[Block] = []
    n = 0
    while n < len(lines):
        opening = _FENCE.match(lines[n])
        if opening is None:
            n += 1
            continue
        indent, fence = opening["indent"], opening["fence"]
        language = opening["info"].strip().split(" ")[0].lstrip(".").lower()
        end = n + 1
        while end < len(lines) and not re.match(
            rf"^[ \t]*{re.escape(fence[0])}{{{len(fence)},}}\s*$", lines[end]
        ):
            end += 1
        body = [
            line[len(indent) :] if line.startswith(indent) else line for line in lines[n + 1 : end]
        ]
        kind: str | None = None
        options: dict[str, tuple[str, ...]] = {}
        previous = next((lines[k] for k in range(n - 1, -1, -1) if lines[k].strip()), "")
        marker = _MARKER.match(previous)
        if marker is not None:
            kind, options = parse_marker(marker["body"], f"{page}:{n + 1}")
        blocks.append(Block(page, n + 1, language, "\n".join(body) + "\n", kind, options))
        n = end + 1
    return blocks


def pages(root: Path) -> list[Path]:
    """README.md and every page under docs/."""
    return [root / "README.md", *sorted((root / "docs").rglob("*.md"))]
