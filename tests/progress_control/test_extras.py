"""A missing optional dependency group names the command that installs it."""

from __future__ import annotations

import pytest

from progress_control.extras import MissingExtraError, require_extra


def test_a_missing_module_names_the_extra_to_install() -> None:
    with pytest.raises(MissingExtraError, match=r"the demo needs no_such_module_kpc, which") as e:
        require_extra("demo", "the demo", "json", "no_such_module_kpc")
    assert "pip install 'kafka-progress-control[demo]'" in str(e.value)
    assert e.value.name == "no_such_module_kpc"
    assert isinstance(e.value, ModuleNotFoundError)  # an import error, as without the check


def test_installed_modules_pass() -> None:
    require_extra("demo", "the demo", "json", "sqlite3")
