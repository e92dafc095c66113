"""Session-wide fixtures: one real Kafka broker per test run.

Broker choice, in order:
1. ``KAFKA_BOOTSTRAP_SERVERS`` set: that cluster.
2. A Docker engine reachable, or ``PROGRESS_CONTROL_TEST_BROKER=testcontainers``: testcontainers'
   Kafka module in KRaft mode (image ``PROGRESS_CONTROL_TEST_KAFKA_IMAGE``), one per worker.
3. Otherwise: the embedded broker from Maven Central jars, one for all pytest-xdist workers
   (:mod:`tests.shared_services`).

A broker that cannot start is an error (never a skip), so a CI run without one fails loudly.

A Confluent-compatible schema registry (``schema_registry_url``), for the tests that ask for one:
``SCHEMA_REGISTRY_URL`` when set, else the embedded Apicurio Registry (Java 21+), one for all
pytest-xdist workers as the broker.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from confluent_kafka.admin import AdminClient, NewTopic

from progress_control_apps.dev.broker import EmbeddedKafkaBroker
from progress_control_apps.dev.schema_registry import EmbeddedSchemaRegistry
from streams_runtime import App, StreamsBuilder

if TYPE_CHECKING:
    from pyspark.sql import SparkSession
from tests import (
    hypothesis_profiles,  # noqa: F401 - importing it loads the Hypothesis profile
    shared_services,
)
from tests.helpers import TopicReader, unique_name, wait_for_leaders
from tests.jvms import TEST_JVM_OPTIONS

DEFAULT_TESTCONTAINERS_IMAGE = "confluentinc/cp-kafka:7.9.2"

# The runtime's record cache (statestore_cache_max_bytes, Kafka Streams' default 10 MiB) absorbs
# intermediate updates, and most tests assert every one of them: tests run with the cache off
# unless they turn it on (tests/streams_runtime/state/test_record_cache*.py). An environment
# default, so that settings built directly and runtime subprocesses get it too.
CACHE_OFF_ENV = "PROGRESS_CONTROL_RUNTIME_STATESTORE_CACHE_MAX_BYTES"
os.environ.setdefault(CACHE_OFF_ENV, "0")

# Spark's JVMs in tests (the session fixture's and those of the jobs and readers the tests start):
# C1 only and the serial collector, read by spark-submit's launcher. Short jobs on small data
# spend most of their CPU compiling and collecting: the Spark tests take about 40% less CPU, and
# they are most of the suite's. Neither changes what Spark computes.
os.environ.setdefault("SPARK_SUBMIT_OPTS", " ".join(TEST_JVM_OPTIONS))
# The brokers the tests start: C1 only as well (a third less CPU over a short life; the broker
# chooses its own collector).
os.environ.setdefault("PROGRESS_CONTROL_BROKER_JVM_OPTIONS", "-XX:TieredStopAtLevel=1")


def _broker_choice() -> str:
    choice = os.environ.get("PROGRESS_CONTROL_TEST_BROKER", "auto")
    if choice not in {"auto", "jar", "testcontainers"}:
        raise pytest.UsageError(
            f"PROGRESS_CONTROL_TEST_BROKER must be auto, jar or testcontainers, not {choice!r}"
        )
    if choice == "testcontainers" or (choice == "auto" and _docker_engine_available()):
        return "testcontainers"
    return "jar"


def pytest_configure(config: pytest.Config) -> None:
    """Under pytest-xdist, the controller has its workers share one embedded broker and one
    schema registry (:mod:`tests.shared_services`), each started by the first of them that
    needs it."""
    workers = getattr(config.option, "numprocesses", None)
    if workers and not hasattr(config, "workerinput"):  # the controller
        config.stash[_SHARED_SERVICES] = shared_services.prepare()


def pytest_unconfigure(config: pytest.Config) -> None:
    run_dir = config.stash.get(_SHARED_SERVICES, None)
    if run_dir is not None:
        shared_services.stop(run_dir)


_SHARED_SERVICES = pytest.StashKey[Path]()


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--conformance-seeds",
        type=int,
        default=3,
        help="seeds of the Kafka Streams conformance suite to run (default 3, as in CI)",
    )


# Tests that run Spark, in a session of the ``spark`` fixture or in a process of their own (the
# jobs' CLI, the demo, a downstream reader): under pytest-xdist (``--dist loadgroup``) each group
# runs on one worker, so at most three Spark JVMs run at once, whatever the number of workers.
# Three groups of some five minutes each, not two of eight: the last group to finish is the end
# of the run.
_SPARK_GROUPS = {
    "tests/progress_control_apps/spark/": "spark-jobs",
    "tests/progress_control_apps/demo/": "spark-demo",
    "tests/streams_runtime/cluster/test_promise_readers.py": "spark",
    "tests/streams_runtime/test_progress_downstream.py": "spark",
    "tests/streams_runtime/test_signed_progress.py": "spark",
}


_DOCS_RUNS = "tests/docs/test_examples.py::test_run"
"""The docs' programs use the names a reader would (``clicks``, ``sessions``) and start from
nothing on them: on a broker the workers share, one worker runs them, one after another."""


_DRIVER_CONFORMANCE = "tests/conformance/test_driver_conformance.py"
"""The conformance suites run in two groups, each on one worker with one Kafka Streams JVM: the
broker's (with the focused and idling cases) and the test drivers' (some four minutes each)."""


_START_FIRST = (
    "tests/streams_runtime/cluster/",
    "tests/streams_runtime/processor/test_processor_cluster_broker.py",
    "tests/streams_runtime/test_operations.py",
    "tests/streams_runtime/test_restart.py",
    "tests/sidecar/test_sidecar.py",
    "tests/readers/",
    "tests/streams_runtime/test_serdes_registry_broker.py",
    "tests/streams_runtime/queries/",
    "tests/progress_control_apps/dev/test_broker.py",
    "tests/interceptor/test_producer.py",
)
"""Test files whose tests take the longest (tens of seconds each, mostly waiting on clocks and
other processes), the longest first: they start first."""


def _start_rank(item: pytest.Item) -> int:
    return next(
        (i for i, prefix in enumerate(_START_FIRST) if item.nodeid.startswith(prefix)),
        len(_START_FIRST),
    )


def _spark_group(item: pytest.Item) -> str | None:
    for prefix, group in _SPARK_GROUPS.items():
        if item.nodeid.startswith(prefix):
            return group
    return "spark" if "spark" in getattr(item, "fixturenames", ()) else None


@pytest.hookimpl(tryfirst=True)  # before pytest-xdist reads the groups
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Every test that gets the session's broker is marked ``broker``, so ``-m "not broker"``
    never starts one (tests that start a broker of their own are marked by hand); every test
    that runs Spark is in one of three Spark groups of pytest-xdist (:data:`_SPARK_GROUPS`), the
    docs' programs in the ``docs-runs`` group, and the conformance suites in two groups (see
    :data:`_DRIVER_CONFORMANCE`)."""
    for item in items:
        spark_group = _spark_group(item)
        if spark_group is not None:
            item.add_marker(pytest.mark.xdist_group(spark_group))
        elif item.nodeid.startswith(_DOCS_RUNS):
            item.add_marker(pytest.mark.xdist_group("docs-runs"))
        elif item.nodeid.startswith(_DRIVER_CONFORMANCE):
            item.add_marker(pytest.mark.xdist_group("kafka-streams-driver"))
        elif item.nodeid.startswith("tests/conformance/"):
            item.add_marker(pytest.mark.xdist_group("kafka-streams"))
    # Long tests first (a stable sort: the order within each prefix stays): pytest-xdist hands
    # out the groups, largest first, then single tests in this order, so the run does not end
    # on a worker that drew a minute-long test last while the others are idle.
    items.sort(key=_start_rank)
    if getattr(config.option, "loadgroup", False):  # a worker under --dist loadgroup
        _check_groups_apply(items)
    unmarked = [
        item.nodeid
        for item in items
        if "kafka_bootstrap" in getattr(item, "fixturenames", ())
        and item.get_closest_marker("broker") is None
    ]
    if unmarked:
        raise pytest.UsageError(
            "tests using the broker without @pytest.mark.broker: " + ", ".join(unmarked)
        )


def _check_groups_apply(items: list[pytest.Item]) -> None:
    """On a worker under ``--dist loadgroup``: fail unless pytest-xdist can group the tests (it
    renames each grouped item ``<nodeid>@<group>`` after this hook; a pytest that keeps node
    ids elsewhere, like 9.2, silently ignores every group, and the Spark tests then run on every
    worker at once)."""
    grouped = next((i for i in items if i.get_closest_marker("xdist_group") is not None), None)
    if grouped is None:
        return
    before = grouped.nodeid
    grouped._nodeid = before + "@probe"  # what pytest-xdist does  # type: ignore[attr-defined]
    applies = grouped.nodeid != before
    grouped._nodeid = before  # type: ignore[attr-defined]
    if not applies:
        raise pytest.UsageError(
            "pytest-xdist cannot group tests with this pytest (--dist loadgroup would ignore "
            "every xdist_group): install the versions pyproject.toml's test extra allows"
        )


def _docker_engine_available() -> bool:
    try:
        import docker

        client = docker.from_env(timeout=3)
        try:
            return bool(client.ping())
        finally:
            client.close()
    except Exception:
        return False


@pytest.fixture(scope="session")
def kafka_bootstrap() -> Iterator[str]:
    """Bootstrap servers of the session's real Kafka broker."""
    external = os.environ.get("KAFKA_BOOTSTRAP_SERVERS")
    if external:
        yield external
        return
    choice = _broker_choice()
    shared = os.environ.get(shared_services.ENV)
    if shared and choice == "jar":
        yield shared_services.address(Path(shared), shared_services.BROKER)
        return
    if choice == "testcontainers":
        from testcontainers.community.kafka import KafkaContainer

        image = os.environ.get("PROGRESS_CONTROL_TEST_KAFKA_IMAGE", DEFAULT_TESTCONTAINERS_IMAGE)
        with KafkaContainer(image).with_kraft() as container:
            yield container.get_bootstrap_server()
        return
    with EmbeddedKafkaBroker() as broker:
        yield broker.bootstrap_servers


@pytest.fixture(scope="session")
def schema_registry_url() -> Iterator[str]:
    """URL of the session's Confluent-compatible Schema Registry API (a ``SchemaRegistryClient``'s
    ``url``): ``SCHEMA_REGISTRY_URL`` when set, else the embedded Apicurio Registry's."""
    external = os.environ.get("SCHEMA_REGISTRY_URL")
    if external:
        yield external
        return
    shared = os.environ.get(shared_services.ENV)
    if shared:
        yield shared_services.address(Path(shared), shared_services.SCHEMA_REGISTRY)
        return
    with EmbeddedSchemaRegistry() as registry:
        yield registry.url


@pytest.fixture(scope="session")
def kafka_admin(kafka_bootstrap: str) -> AdminClient:
    return AdminClient({"bootstrap.servers": kafka_bootstrap})


@pytest.fixture
def create_topic(kafka_admin: AdminClient) -> Callable[..., str]:
    """Create a uniquely named topic; ``create_topic("clicks", partitions=4)`` returns its name."""

    def create(prefix: str = "topic", partitions: int = 1, **config: str) -> str:
        name = unique_name(prefix)
        # Test data is dated years back (fixed timestamps): without this, a retention check
        # of the long-running test broker could delete it mid-test.
        config = {"retention.ms": "-1", **config}
        topic = NewTopic(name, num_partitions=partitions, replication_factor=1, config=config)
        for future in kafka_admin.create_topics([topic]).values():
            future.result(timeout=30)
        # A client that looks before the broker serves it (a sidecar's first metadata request)
        # would not see it until its next periodic refresh.
        wait_for_leaders(kafka_admin, [name])
        return name

    return create


@pytest.fixture
def reader_for(kafka_bootstrap: str) -> Iterator[Callable[[str, int], TopicReader]]:
    readers: list[TopicReader] = []

    def make(topic: str, partitions: int) -> TopicReader:
        readers.append(TopicReader(kafka_bootstrap, topic, partitions))
        return readers[-1]

    yield make
    for reader in readers:
        reader.close()


@pytest.fixture
def run_app(kafka_bootstrap: str, tmp_path: Path) -> Iterator[Callable[..., App]]:
    """Start a streams runtime ``App`` in a background thread; ``run_app(builder, **settings)``.
    Every app gets a unique application id and its own state dir, and is closed at teardown."""
    apps: list[App] = []

    def start(builder: StreamsBuilder, **settings: object) -> App:
        settings.setdefault("application_id", unique_name("app"))
        settings.setdefault("state_dir", tmp_path / f"state-{len(apps)}")
        settings.setdefault("commit_interval_ms", 200)
        settings.setdefault("statestore_cache_max_bytes", 0)
        app = App(builder, bootstrap_servers=kafka_bootstrap, **settings)
        apps.append(app)
        app.start()
        assert app.wait_until("RUNNING", 60), f"app did not start: {app.error!r}"
        return app

    yield start
    for app in apps:
        app.close()


@pytest.fixture(scope="session")
def spark() -> Iterator[SparkSession]:
    """One local[2] SparkSession (with Spark's Kafka connector) for the whole test session; the
    main job's test reuses it too (``spark_session`` returns the running session)."""
    from progress_control_apps.spark import spark_session

    session = spark_session("local[2]", "progress-control-tests")
    yield session
    session.stop()
