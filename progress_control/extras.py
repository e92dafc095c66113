"""Optional dependency groups (extras): one clear error that names the extra to install."""

from __future__ import annotations

import importlib.util

__all__ = ["MissingExtraError", "require_extra"]


class MissingExtraError(ModuleNotFoundError):
    """A feature needs an optional dependency group (extra) that is not installed."""


def require_extra(extra: str, what: str, *modules: str) -> None:
    """Raise :class:`MissingExtraError` naming ``extra`` unless every module is importable."""
    missing = [name for name in modules if importlib.util.find_spec(name) is None]
    if missing:
        raise MissingExtraError(
            f"{what} needs {', '.join(missing)}, which is not installed: "
            f"pip install 'kafka-progress-control[{extra}]'",
            name=missing[0],
        )
