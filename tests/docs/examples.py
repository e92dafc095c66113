"""The examples to check, collected from the pages: each ``run`` block with its ``output`` block
and the rest of its sequence, and every other block to check alone."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from tests.docs.blocks import Block, MarkerError, blocks_of, pages

__all__ = ["Collected", "Example", "collect"]


@dataclass
class Example:
    """A block to check; for a ``run`` block, the ``output`` block after it, the later blocks
    of its ``sequence`` (``steps``, each with its own output), and the other places the same
    block appears (run once for all)."""

    block: Block
    output: str | None = None
    steps: list[Example] = field(default_factory=list)
    also: list[str] = field(default_factory=list)


@dataclass
class Collected:
    runs: list[Example] = field(default_factory=list)
    others: list[Example] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)


def collect(root: Path) -> Collected:
    """Every example of README.md and docs/ under ``root``."""
    found = Collected()
    runs: dict[tuple[str, tuple[tuple[str, tuple[str, ...]], ...]], Example] = {}
    for path in pages(root):
        try:
            blocks = blocks_of(path, root)
        except MarkerError as exc:
            found.errors.append(str(exc))
            continue
        last_run: Example | None = None  # what an output block belongs to
        sequences: dict[str, Example] = {}  # a sequence's first block, by name
        for block in blocks:
            kind = block.effective_kind
            sequence = block.options.get("sequence", ("",))[0]
            if kind == "run" and sequence in sequences:
                last_run = Example(block)
                sequences[sequence].steps.append(last_run)
            elif kind == "run":
                key = (block.code, tuple(sorted(block.options.items())))
                if key in runs:
                    runs[key].also.append(block.where)
                    last_run = None  # its output is the first's
                else:
                    runs[key] = last_run = Example(block)
                    found.runs.append(last_run)
                    if sequence:
                        sequences[sequence] = last_run
            elif kind == "output":
                if last_run is None or last_run.output is not None:
                    found.errors.append(
                        f"{block.where}: an output block needs a run block before it"
                    )
                    continue
                last_run.output = block.code
            elif kind != "illustrative":
                found.others.append(Example(block))
    return found
