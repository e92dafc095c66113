"""``argparse`` value types shared by the project's command lines: a bad value is an argparse
error naming the option, never a traceback."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import TypeVar

__all__ = ["positive_float", "positive_int"]

N = TypeVar("N", int, float)


def _positive(kind: Callable[[str], N], what: str) -> Callable[[str], N]:
    def parse(text: str) -> N:
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not {what}: {text!r}") from None
        if value <= 0:
            raise argparse.ArgumentTypeError(f"must be positive: {text!r}")
        return value

    return parse


positive_int = _positive(int, "an integer")
positive_float = _positive(float, "a number")
