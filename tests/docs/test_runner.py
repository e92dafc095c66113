"""The runner itself: markers, the shell checks and the output comparison catch what they are
for (a wrong option, an unknown variable, a renamed import)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from tests.docs.blocks import Block, MarkerError, blocks_of, parse_marker
from tests.docs.examples import collect
from tests.docs.python_blocks import check_fragment, free_names, output_matches
from tests.docs.shell import check_shell

PAGE = """# A page

<!-- example: run; topics: a b; apps: app -->

```python
print("hi")
```

<!-- example: output -->

```
hi
```

- In a list:

    ```bash
    ./dev test
    ```

```yaml
key: value
```
"""


def test_blocks_and_markers(tmp_path: Path) -> None:
    (tmp_path / "page.md").write_text(PAGE)
    run, output, shell, yaml = blocks_of(tmp_path / "page.md", tmp_path)
    assert (run.kind, run.options) == ("run", {"topics": ("a", "b"), "apps": ("app",)})
    assert (run.language, run.code, run.where) == ("python", 'print("hi")\n', "page.md:5")
    assert (output.kind, output.code) == ("output", "hi\n")
    assert (shell.kind, shell.effective_kind, shell.code) == (None, None, "./dev test\n")
    assert (yaml.kind, yaml.effective_kind) == (None, "illustrative")


def test_bad_markers_are_errors() -> None:
    with pytest.raises(MarkerError, match="unknown example kind 'runn'"):
        parse_marker("runn", "p.md:1")
    with pytest.raises(MarkerError, match="takes no option"):
        parse_marker("fragment; topics: a", "p.md:1")


@pytest.mark.parametrize(
    ("code", "problem"),
    [
        ("./dev tset\n", "no command 'tset'"),
        ("./dev test tests/no_such_dir\n", "does not exist"),
        ("./dev bench no-such-bench\n", "no benchmark"),
        ("progress-control brokr\n", "no command 'brokr'"),
        ("progress-control broker --prot 1\n", "no option '--prot'"),
        ("PROGRESS_CONTROL_START_SM=1 progress-control run -- python app.py\n", "START_MS"),
        ("python -m progress_control_apps.spark stream --gapp 1s\n", "no option '--gapp'"),
        ("X=$(progress-control autoload-pth) python app.py\n", "no command 'autoload-pth'"),
        ("progress-control run -- progress-control sidecr\n", "no command 'sidecr'"),
        ("mvn -q -f readers/pom.xml -pl nope -am install\n", "readers/nope"),
    ],
)
def test_shell_checks_find_drift(code: str, problem: str) -> None:
    report = check_shell(code)
    assert any(problem in p for p in report.problems), report


def test_shell_checks_pass_and_say_what_they_left() -> None:
    report = check_shell(
        "PROGRESS_CONTROL_KAFKA__BOOTSTRAP_SERVERS=k:9092 \\\n  progress-control sidecar  # c\n"
        "pip install kafka-progress-control && ./dev test tests/docs -k run\n"
    )
    assert not report.problems
    assert report.checked == [
        "PROGRESS_CONTROL_KAFKA__BOOTSTRAP_SERVERS",
        "progress-control sidecar",
        "./dev test",
    ]
    assert report.unchecked == ["pip"]


def test_output_comparison() -> None:
    assert output_matches("a 1\nb  \n", "a 1\nb\n")
    assert output_matches("served by 127.0.0.1:40123\n", "served by ...\n")
    assert not output_matches("a 1\n", "a 2\n")
    assert not output_matches("a\nb\n", "a\n")


def test_free_names() -> None:
    tree = ast.parse("import x\nfrom y import z\nv = x(z, w)\nf = lambda a: a + q\n")
    assert free_names(tree) == {"w", "q"}


def test_fragments_catch_a_renamed_import_and_undeclared_names() -> None:
    def block(code: str, **options: tuple[str, ...]) -> Block:
        return Block("p.md", 1, "python", code, "fragment", options)

    with pytest.raises(ImportError):
        check_fragment(block("from streams_runtime import SessionWindow\n"))
    with pytest.raises(AssertionError, match=r"uses \['builder'\]"):
        check_fragment(block("builder.stream('a')\n"))
    with pytest.raises(AttributeError):  # executed with a real builder
        check_fragment(block("builder.stream('a').group_by_kee()\n", given=("builder",)))
    check_fragment(block("builder.stream('a').group_by_key().count()\n", given=("builder",)))


SEQUENCE = """
<!-- example: run; sequence: tour; absent: t -->

```python
print(1)
```

<!-- example: run; sequence: tour -->

```python
print(2)
```

<!-- example: output -->

```
2
```

<!-- example: run -->

```python
print(3)
```
"""


def test_sequences_collect_into_one_example(tmp_path: Path) -> None:
    (tmp_path / "docs").mkdir()
    (tmp_path / "README.md").write_text(SEQUENCE + "\n```python\nprint(3)\n```\n")
    page = "<!-- example: run -->\n\n```python\nprint(3)\n```\n"
    (tmp_path / "docs" / "page.md").write_text(page)
    found = collect(tmp_path)
    assert not found.errors
    tour, three = found.runs
    assert (tour.block.code, tour.output) == ("print(1)\n", None)
    assert [(s.block.code, s.output) for s in tour.steps] == [("print(2)\n", "2\n")]
    assert (three.block.where, three.also) == ("README.md:22", ["docs/page.md:3"])
    assert [e.block.where for e in found.others] == ["README.md:26"]  # unmarked: an error
