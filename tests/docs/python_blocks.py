"""Running Python blocks: ``fragment`` blocks (compiled, imports run, executed with their
``given`` names) and ``run`` blocks (executed in-process as a user runs them, against the
suite's broker, ``App.run()`` bounded by a companion driver).

Conventions a ``run`` block is executed under (docs/contributing.md#examples-are-tests):

- ``localhost:9092`` in the block means the suite's broker: the runner substitutes its address;
- it runs in a temporary directory, as ``__main__``, with the runtime's state under it
  (``PROGRESS_CONTROL_RUNTIME_STATE_DIR``) and a 200 ms commit interval
  (``PROGRESS_CONTROL_RUNTIME_COMMIT_INTERVAL_MS``) unless the block sets its own;
- ``topics:`` are created empty (deleted first if there), ``absent:`` topics deleted (the block
  creates them), ``apps:`` application ids start from nothing (their group and internal
  topics deleted first);
- ``App.run()`` (which runs until SIGTERM) runs bounded: the app starts in the background,
  the block's ``driver:`` (:mod:`tests.docs.drivers`) feeds and checks it while it runs, then
  the app is closed and ``run()`` returns, raising the app's error if it stopped on one;
  without a driver, the blocks of the same ``sequence:`` after it are what runs beside it (a
  tutorial's "in another terminal"), each compared with its own ``output`` block;
- blocks of one ``sequence: NAME`` run in page order as one test, the broker state passing
  from one to the next;
- what it prints is compared with the page's next ``output`` block, when there is one.
"""

from __future__ import annotations

import ast
import builtins
import contextlib
import io
import re
import threading
import time
import types
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from unittest import mock

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer
from confluent_kafka.admin import AdminClient, NewTopic

from streams_runtime import App, StreamsBuilder
from tests.docs.blocks import Block
from tests.docs.drivers import DRIVERS, Driver, RunEnv
from tests.docs.examples import Example
from tests.docs.givens import GIVENS

__all__ = ["check_fragment", "free_names", "output_matches", "run_block", "run_tests"]

DOCS_BOOTSTRAP = "localhost:9092"
"""What a block's bootstrap address is replaced with the suite's broker's."""


def _require(block: Block) -> None:
    for module in block.options.get("requires", ()):
        pytest.importorskip(module, reason=f"{block.where} needs {module}")


def free_names(tree: ast.AST) -> set[str]:
    """Names ``tree`` reads but never binds (crudely: bound anywhere counts as bound)."""
    loaded: set[str] = set()
    bound: set[str] = set(dir(builtins))
    for node in ast.walk(tree):
        if isinstance(node, ast.Name):
            (loaded if isinstance(node.ctx, ast.Load) else bound).add(node.id)
        elif isinstance(node, ast.alias):
            bound.add((node.asname or node.name).split(".")[0])
        elif isinstance(node, ast.arg):
            bound.add(node.arg)
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            bound.add(node.name)
    return loaded - bound


def check_fragment(block: Block) -> None:
    """Compile ``block``, run its imports; with ``given`` names, execute it with them (and
    build the topology of a given ``builder``)."""
    _require(block)
    tree = ast.parse(block.code, filename=block.where)
    given = set(block.options.get("given", ()))
    unknown = given - set(GIVENS)
    assert not unknown, f"{block.where}: no given {sorted(unknown)} in tests/docs/givens.py"
    free = free_names(tree) - given
    assert not free, f"{block.where}: uses {sorted(free)}: define them or list them in given:"
    imports = ast.Module(
        body=[n for n in tree.body if isinstance(n, ast.Import | ast.ImportFrom)], type_ignores=[]
    )
    exec(compile(imports, block.where, "exec"), {"__name__": "docs_fragment"})  # noqa: S102
    if not given:
        return
    namespace: dict[str, Any] = {"__name__": "docs_fragment"}
    namespace.update({name: GIVENS[name]() for name in given})
    try:
        exec(compile(tree, block.where, "exec"), namespace)  # noqa: S102
        builder = namespace.get("builder")
        if isinstance(builder, StreamsBuilder):
            builder.build("docs-fragment")
    finally:
        for value in namespace.values():  # clients it made (never used: nothing to flush)
            if isinstance(value, Producer | Consumer):
                value.close()


def run_tests(block: Block) -> None:
    """Execute ``block`` as a test module and call each of its ``test_*`` functions, as pytest
    would (without fixtures: a page's test module takes none)."""
    _require(block)
    namespace: dict[str, Any] = {"__name__": "docs_test_module"}
    exec(compile(block.code, block.where, "exec"), namespace)  # noqa: S102
    tests = [f for name, f in namespace.items() if name.startswith("test_") and callable(f)]
    assert tests, f"{block.where}: a test block without a test_* function"
    for test in tests:
        test()


_INTERNAL_SUFFIXES = ("-changelog", "-repartition", "-membership")
"""The runtime's internal topics: ``<application_id>-...<suffix>``, and ``<app>-dlq``."""


def _delete_and_wait(admin: AdminClient, topics: list[str]) -> None:
    existing = set(admin.list_topics(timeout=10).topics)
    doomed = [t for t in topics if t in existing]
    if not doomed:
        return
    for future in admin.delete_topics(doomed, operation_timeout=30).values():
        with contextlib.suppress(KafkaException):
            future.result(timeout=30)
    deadline = time.monotonic() + 30
    while set(doomed) & set(admin.list_topics(timeout=10).topics):
        assert time.monotonic() < deadline, f"topics {doomed} not deleted"
        time.sleep(0.1)


def _delete_groups(admin: AdminClient, groups: tuple[str, ...]) -> None:
    """Delete ``groups`` where they exist. A coordinator under the whole suite's load has taken
    more than 30 s to answer: the request is asked again until a minute and a half has passed."""
    deadline = time.monotonic() + 90
    pending = list(groups)
    while pending:
        futures = admin.delete_consumer_groups(pending, request_timeout=30)
        for group, future in futures.items():
            try:
                future.result(timeout=40)  # past request_timeout: librdkafka answers first
            except (KafkaException, TimeoutError) as exc:
                slow = isinstance(exc, TimeoutError) or exc.args[0].code() in _GROUP_SLOW
                if slow and time.monotonic() < deadline:
                    continue
            pending.remove(group)  # deleted, never there, or an answer a retry would not change


_GROUP_SLOW = frozenset(
    {
        KafkaError._TIMED_OUT,
        KafkaError.REQUEST_TIMED_OUT,
        KafkaError.COORDINATOR_LOAD_IN_PROGRESS,
        KafkaError.COORDINATOR_NOT_AVAILABLE,
        KafkaError.NOT_COORDINATOR,
    }
)


def _fresh(
    admin: AdminClient, topics: tuple[str, ...], apps: tuple[str, ...], absent: tuple[str, ...]
) -> None:
    """Topics ``topics`` empty, ``absent`` not there, application ids ``apps`` never run (on a
    shared cluster, an earlier session may have left them)."""
    if apps:
        _delete_groups(admin, apps)
    existing = admin.list_topics(timeout=10).topics
    internal = [
        topic
        for topic in existing
        for app in apps
        if topic.startswith(f"{app}-")
        and (topic.endswith(_INTERNAL_SUFFIXES) or topic == f"{app}-dlq")
    ]
    _delete_and_wait(admin, [*topics, *absent, *internal])
    deadline = time.monotonic() + 30
    pending = list(topics)
    while pending:
        futures = admin.create_topics(
            [NewTopic(t, num_partitions=1, replication_factor=1) for t in pending]
        )
        for topic, future in futures.items():
            try:
                future.result(timeout=30)
                pending.remove(topic)
            except KafkaException as exc:  # still being deleted, or made again meanwhile
                assert time.monotonic() < deadline, f"topic {topic} not created"
                if exc.args[0].code() == KafkaError.TOPIC_ALREADY_EXISTS:
                    # A client of an earlier block still asking for it had the broker create
                    # it again (auto-creation): delete it once more.
                    _delete_and_wait(admin, [topic])
        time.sleep(0.1 if pending else 0)


@contextlib.contextmanager
def _bounded_run(block: Block, driver: Driver | None, env: RunEnv) -> Iterator[list[App]]:
    """``App.run()`` for the duration: start in the background, run the block's driver, close
    (the module docstring). Yields every app the block created, to close at the end."""
    created: list[App] = []
    original_init, original_run = App.__init__, App.run

    def init(self: App, *args: Any, **kwargs: Any) -> None:
        original_init(self, *args, **kwargs)
        created.append(self)

    def run(self: App) -> None:
        if threading.current_thread() is not threading.main_thread():
            original_run(self)  # start()'s thread: the real loop
            return
        assert driver is not None
        self.run = types.MethodType(original_run, self)  # type: ignore[method-assign]
        self.start()
        try:
            assert self.wait_until("RUNNING", 60), f"app did not start: {self.error!r}"
            driver.while_running(self, env)
        finally:
            self.close()
        if self.error is not None:
            raise self.error

    if driver is not None:
        driver.before(env)
    with mock.patch.object(App, "__init__", init), mock.patch.object(App, "run", run):
        try:
            yield created
        finally:
            for app in created:
                app.close()
    if driver is not None:
        driver.after(env)


def _execute(block: Block, expected_output: str | None, bootstrap: str) -> None:
    """Execute ``block`` as ``__main__`` (the broker substituted), comparing what it prints."""
    stdout = io.StringIO()
    code = block.code.replace(DOCS_BOOTSTRAP, bootstrap)
    with contextlib.redirect_stdout(stdout):
        exec(compile(code, block.where, "exec"), {"__name__": "__main__"})  # noqa: S102
    if expected_output is not None:
        printed = stdout.getvalue().replace(bootstrap, DOCS_BOOTSTRAP)
        assert output_matches(printed, expected_output), (
            f"{block.where} printed:\n{printed}\nthe page says:\n{expected_output}"
        )


class _Sequence(Driver):
    """The rest of a ``sequence`` of blocks: run in order after its first one; from inside an
    ``App.run()`` of one of them, the blocks after it run while its app runs (as a reader runs
    them in another terminal). Each is compared with its own ``output`` block."""

    def __init__(self, steps: list[Example], bootstrap: str) -> None:
        self.pending = list(steps)
        self.bootstrap = bootstrap

    def run_pending(self) -> None:
        while self.pending:
            step = self.pending.pop(0)
            _require(step.block)
            _execute(step.block, step.output, self.bootstrap)

    def while_running(self, app: App, env: RunEnv) -> None:
        assert self.pending, (
            "App.run() with nothing beside it: a driver: or later blocks of its sequence"
        )
        self.run_pending()


def run_block(
    example: Example, bootstrap: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Execute a ``run`` block (see the module docstring)."""
    block = example.block
    _require(block)
    admin = AdminClient({"bootstrap.servers": bootstrap})
    _fresh(
        admin,
        block.options.get("topics", ()),
        block.options.get("apps", ()),
        block.options.get("absent", ()),
    )
    env = RunEnv(bootstrap=bootstrap, admin=admin, tmp_path=tmp_path)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("PROGRESS_CONTROL_RUNTIME_STATE_DIR", str(tmp_path / "state"))
    monkeypatch.setenv("PROGRESS_CONTROL_RUNTIME_COMMIT_INTERVAL_MS", "200")
    sequence = _Sequence(example.steps, bootstrap)
    driver = DRIVERS[block.options["driver"][0]]() if "driver" in block.options else sequence
    with _bounded_run(block, driver, env):
        _execute(block, example.output, bootstrap)
        sequence.run_pending()


def output_matches(printed: str, expected: str) -> bool:
    """Line by line, trailing blanks ignored; ``...`` in an expected line matches anything
    (a port, a timestamp), as doctest's ELLIPSIS does."""
    got = [line.rstrip() for line in printed.strip().splitlines()]
    want = [line.rstrip() for line in expected.strip().splitlines()]
    return len(got) == len(want) and all(
        re.fullmatch(".*".join(map(re.escape, w.split("..."))), g)
        for g, w in zip(got, want, strict=True)
    )
