"""Examples are tests (docs/contributing.md#examples-are-tests): every code block of README.md
and docs/, by its marker: ``run`` blocks are executed against the suite's broker (their output
compared with the page's ``output`` block), ``test`` blocks' test functions called, ``fragment``
blocks compiled, their imports run and,
with ``given`` names, executed; ``shell`` blocks' commands checked; Python and shell blocks
without a marker fail."""

from __future__ import annotations

from pathlib import Path

import pytest
from _pytest.mark import ParameterSet

from tests.docs.examples import Example, collect
from tests.docs.python_blocks import check_fragment, run_block, run_tests
from tests.docs.shell import check_shell
from tests.paths import ROOT

# Pages whose owners have yet to mark their blocks -> why. An unmarked Python or shell block
# there is an expected failure (strict: once marked, it is checked like any other); a page
# whose blocks are all marked must leave this list (test_pending_pages_have_unmarked_blocks).
PENDING_PAGES: dict[str, str] = {}


COLLECTED = collect(ROOT)
RUNS, OTHERS, MARKER_ERRORS = COLLECTED.runs, COLLECTED.others, COLLECTED.errors


def _params(examples: list[Example]) -> list[ParameterSet]:
    params = []
    for example in examples:
        block = example.block
        reason = PENDING_PAGES.get(block.page) if block.effective_kind is None else None
        marks = [pytest.mark.xfail(strict=True, reason=reason)] if reason else []
        params.append(pytest.param(example, id=block.where, marks=marks))
    return params


def test_markers_parse() -> None:
    assert not MARKER_ERRORS, "\n".join(MARKER_ERRORS)


def test_pending_pages_have_unmarked_blocks() -> None:
    """A page of PENDING_PAGES whose blocks are all marked leaves the list."""
    unmarked = {e.block.page for e in [*RUNS, *OTHERS] if e.block.effective_kind is None}
    assert set(PENDING_PAGES) <= unmarked, sorted(set(PENDING_PAGES) - unmarked)


@pytest.mark.parametrize("example", _params(OTHERS))
def test_block(example: Example) -> None:
    block = example.block
    kind = block.effective_kind
    if kind is None:
        pytest.fail(
            f"{block.where}: a {block.language} block without a marker: say what it is "
            "(<!-- example: run | test | fragment | shell | illustrative -->, docs/contributing.md)"
        )
    elif kind == "fragment":
        check_fragment(block)
    elif kind == "test":
        run_tests(block)
    elif kind == "shell":
        report = check_shell(block.code)
        assert not report.problems, f"{block.where}: " + "; ".join(report.problems)
        assert report.checked, f"{block.where}: nothing checkable: mark it illustrative"
    else:
        pytest.fail(f"{block.where}: {kind!r} blocks are not checked alone")


@pytest.mark.broker
@pytest.mark.parametrize("example", _params(RUNS))
def test_run(
    example: Example, kafka_bootstrap: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    run_block(example, kafka_bootstrap, tmp_path, monkeypatch)
