"""``python -m progress_control_apps.spark stream|batch|reconcile``: the Spark jobs from the command
line.

Every option is validated before Spark starts; a bad value names its option
(``argument --gap: not a duration: '30x' ...``) and exits with status 2. So are the
settings read from ``PROGRESS_CONTROL_SPARK_*`` env variables
(:mod:`progress_control_apps.spark.settings`: which control records move time, verification keys):
keys never come from the command line.

What a data record looks like (:class:`~progress_control_apps.spark.input_schema.InputSchema`) comes
from the input-schema options (``--user-field``/``--user-from-key``, ``--time-field``/
``--time-from-record``, ``--page-field``/``--no-page-field``, ``--integer-field``/
``--no-integer-fields``), each winning over its variable
(``PROGRESS_CONTROL_SPARK_INPUT_USER_FIELD`` and so on), and how values are encoded
(``--value-format json|avro|json-schema``, ``--schema-registry-url``, ``--value-subject``,
``--on-unknown-schema-id``).
"""

from __future__ import annotations

import argparse
import dataclasses
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING

from progress_control.argtypes import positive_int
from progress_control.settings import ConfigurationError
from progress_control_apps.spark.durations import parse_duration_ms, parse_instant_ms
from progress_control_apps.spark.input_schema import (
    UNKNOWN_SCHEMA_ID_POLICIES,
    VALUE_FORMATS,
    InputSchema,
)
from progress_control_apps.spark.registry import RegistryError
from progress_control_apps.spark.settings import load_job_settings

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from progress_control_apps.spark.batch import BatchRange

__all__ = ["build_parser", "input_schema", "main"]


def main(argv: Sequence[str] | None = None) -> int:
    """Run one job; returns the exit status (reconcile: 1 when the sides differ)."""
    args = build_parser().parse_args(argv)
    try:
        settings = load_job_settings()
        args.trust = settings.trust_policy()
        args.schema = input_schema(args, settings.input_schema())
    except (ConfigurationError, ValueError) as exc:
        print(f"python -m progress_control_apps.spark: error: {exc}", file=sys.stderr)
        return 2
    handler: Callable[[argparse.Namespace], int] = args.handler
    try:
        return handler(args)
    except RegistryError as exc:  # the value schemas, fetched when the job starts
        print(f"python -m progress_control_apps.spark: error: {exc}", file=sys.stderr)
        return 2


def build_parser() -> argparse.ArgumentParser:
    """The argument parser (exposed for tests and ``--help``)."""
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--bootstrap-servers", required=True, help="Kafka bootstrap servers")
    common.add_argument("--topic", required=True, help="events topic (comma list allowed)")
    common.add_argument(
        "--gap", required=True, type=_positive_duration, help="session gap, e.g. 30s"
    )
    common.add_argument("--master", default="local[*]", help="Spark master (default local[*])")
    common.add_argument(
        "--conf",
        action="append",
        default=[],
        type=_spark_conf,
        metavar="spark.KEY=VALUE",
        help="a Spark setting (repeatable)",
    )
    common.add_argument(
        "--kafka-option",
        action="append",
        default=[],
        type=_key_value,
        metavar="KEY=VALUE",
        help="a Kafka source option, e.g. kafka.security.protocol=SSL (repeatable)",
    )

    parser = argparse.ArgumentParser(
        prog="python -m progress_control_apps.spark",
        description="Sessionize click events from Kafka with Spark; control records advance "
        "event time so sessions close without new data.",
    )
    jobs = parser.add_subparsers(required=True, metavar="JOB")

    stream = jobs.add_parser("stream", parents=[common], help="the streaming job")
    _add_input_schema(stream)
    stream.add_argument("--output", required=True, help="output root: sessions/ and errors/")
    stream.add_argument("--checkpoint", required=True, help="checkpoint root")
    stream.add_argument(
        "--watermark-delay", type=_duration, default=0, help="allowed lateness (default 0)"
    )
    stream.add_argument(
        "--trigger", type=_positive_duration, default=1000, help="trigger interval (default 1s)"
    )
    stream.add_argument("--starting-offsets", default="earliest", help="earliest, latest or JSON")
    stream.add_argument("--max-offsets-per-trigger", type=positive_int, default=None)
    stream.add_argument("--output-topic", help="also write sessions to this topic as JSON")
    stream.add_argument(
        "--run-for", type=_positive_duration, default=None, help="stop after this long"
    )
    stream.set_defaults(handler=_stream)

    batch = jobs.add_parser("batch", parents=[common], help="the batch (backfill) job")
    _add_input_schema(batch)
    batch.add_argument("--output", required=True, help="output root: sessions/ and errors/")
    _add_range(batch)
    batch.add_argument(
        "--closed-only",
        action="store_true",
        help="keep only sessions the stream would have closed by the end of the range",
    )
    batch.add_argument("--watermark-delay", type=_duration, default=0)
    batch.set_defaults(handler=_batch)

    reconcile = jobs.add_parser(
        "reconcile", parents=[common], help="compare with the streams runtime's sessions topic"
    )
    _add_input_schema(reconcile)
    reconcile.add_argument("--sessions-topic", required=True, help="the runtime's sessions")
    reconcile.add_argument("--grace", type=_duration, default=0, help="the runtime's grace")
    _add_range(reconcile)
    reconcile.set_defaults(handler=_reconcile)
    return parser


INPUT_SCHEMA_HELP = """\
What a data record of --topic must look like. Its value is a JSON object; by default
{"user": <string>, "page": <string>, "ts": <integer>, ...} with the Kafka record timestamp as
the event time (ts is checked, not used): what the runtime forwards to an events topic. A record
that does not fit goes to the errors output with the reason, e.g. "missing field 'user'". Each
option wins over its variable (PROGRESS_CONTROL_SPARK_INPUT_USER_FIELD and so on)."""

VALUE_FORMAT_HELP = """\
How values are encoded. avro and json-schema values are Schema Registry-framed (magic byte 0, a
4-byte schema id, the payload); an Avro value is decoded with the writer schema its id names,
fetched with every version of the subject when the job starts, and read as the latest. Framing
and decoding problems go to the errors output ("unknown schema id 7"). Each option wins over its
variable (PROGRESS_CONTROL_SPARK_INPUT_VALUE_FORMAT, PROGRESS_CONTROL_SPARK_SCHEMA_REGISTRY_URL,
PROGRESS_CONTROL_SPARK_INPUT_VALUE_SUBJECT, PROGRESS_CONTROL_SPARK_INPUT_ON_UNKNOWN_SCHEMA_ID)."""


def _add_input_schema(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("input schema", INPUT_SCHEMA_HELP)
    _field_or_flag(
        group,
        "--user-field",
        "the value field holding the user, a string (user)",
        "--user-from-key",
        "the record key (UTF-8, not null) is the user",
    )
    _field_or_flag(
        group,
        "--time-field",
        "event time from this value field: epoch ms as a JSON integer (not a string, "
        "fraction or exponent); it must be the record's own timestamp for ticks to apply "
        "(default: the Kafka record timestamp)",
        "--time-from-record",
        "event time is the Kafka record timestamp (the default)",
    )
    _field_or_flag(
        group,
        "--page-field",
        "a string field every event must carry (page)",
        "--no-page-field",
        "no page field required",
    )
    _field_or_flag(
        group,
        "--integer-field",
        "an integer field every event must carry, checked, not used; repeatable, replaces "
        "the default (ts)",
        "--no-integer-fields",
        "no integer field required",
        repeatable=True,
    )
    values = parser.add_argument_group("value format", VALUE_FORMAT_HELP)
    values.add_argument(
        "--value-format",
        choices=VALUE_FORMATS,
        help="json (the default), avro or json-schema (both Schema Registry-framed)",
    )
    values.add_argument(
        "--schema-registry-url",
        metavar="URL",
        help="the registry's Confluent-compatible API, required for avro; a URL holding "
        "credentials belongs in PROGRESS_CONTROL_SPARK_SCHEMA_REGISTRY_URL, not here",
    )
    values.add_argument(
        "--value-subject", metavar="SUBJECT", help="the value schemas' subject (<topic>-value)"
    )
    values.add_argument(
        "--on-unknown-schema-id",
        choices=UNKNOWN_SCHEMA_ID_POLICIES,
        help="a schema id the job did not fetch at start: an error row (error, the default) or "
        "a failed job (fail: restarted, it fetches the schemas again and reads the record)",
    )


def _field_or_flag(
    group: argparse._ArgumentGroup,
    field: str,
    field_help: str,
    flag: str,
    flag_help: str,
    *,
    repeatable: bool = False,
) -> None:
    """A ``--x-field NAME`` option and the flag that stands instead of it, mutually exclusive."""
    pair = group.add_mutually_exclusive_group()
    pair.add_argument(
        field,
        metavar="NAME",
        type=_field_name,
        action="append" if repeatable else "store",
        help=field_help,
    )
    pair.add_argument(flag, action="store_true", default=None, help=flag_help)


def input_schema(args: argparse.Namespace, base: InputSchema | None = None) -> InputSchema:
    """The input schema of parsed arguments: ``base`` (the environment's, else the default)
    with every input-schema option given on the command line applied."""
    schema = base or InputSchema()
    user, time, page, integers = (
        schema.user_field,
        schema.time_field,
        schema.page_field,
        schema.integer_fields,
    )
    if args.user_from_key:
        user = None
    elif args.user_field is not None:
        user = args.user_field
    if args.time_from_record:
        time = None
    elif args.time_field is not None:
        time = args.time_field
    if args.no_page_field:
        page = None
    elif args.page_field is not None:
        page = args.page_field
    if args.no_integer_fields:
        integers = ()
    elif args.integer_field is not None:
        integers = tuple(args.integer_field)
    given = {
        "value_format": args.value_format,
        "schema_registry_url": args.schema_registry_url,
        "value_subject": args.value_subject,
        "on_unknown_schema_id": args.on_unknown_schema_id,
    }
    return dataclasses.replace(
        schema,
        user_field=user,
        time_field=time,
        page_field=page,
        integer_fields=integers,
        **{name: value for name, value in given.items() if value is not None},
    )


def _add_range(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--starting-offsets", default="earliest", help="earliest or JSON")
    parser.add_argument("--ending-offsets", default="latest", help="latest or JSON")
    parser.add_argument(
        "--from",
        dest="start_time",
        type=_instant,
        help="first Kafka record timestamp (epoch ms or ISO)",
    )
    parser.add_argument("--to", dest="end_time", type=_instant, help="end time, exclusive")


def _stream(args: argparse.Namespace) -> int:
    from progress_control_apps.spark.source import KafkaSource
    from progress_control_apps.spark.stream import SessionizationStream, StreamConfig

    config = StreamConfig(
        source=KafkaSource(
            args.bootstrap_servers, args.topic, dict(args.kafka_option), args.schema
        ),
        gap_ms=args.gap,
        output_dir=args.output,
        checkpoint_dir=args.checkpoint,
        watermark_delay_ms=args.watermark_delay,
        trigger_interval_ms=args.trigger,
        starting_offsets=args.starting_offsets,
        max_offsets_per_trigger=args.max_offsets_per_trigger,
        output_topic=args.output_topic,
        trust=args.trust,
    )
    job = SessionizationStream(_spark(args, "sessionization-stream"), config).start()
    print(f"streaming: sessions to {config.sessions_location}, errors to {config.errors_location}")
    print(f"input: {config.source.schema.describe()}")
    if job.value_schemas is not None:
        print(f"value schemas: {job.value_schemas.describe()}")
    deadline = None if args.run_for is None else time.monotonic() + args.run_for / 1000
    try:
        with _stop_signals() as stop:
            while not stop.is_set():
                wait = 1.0 if deadline is None else min(1.0, deadline - time.monotonic())
                if wait <= 0 or job.await_termination(wait):
                    break
            if stop.is_set():
                print("stopping...", file=sys.stderr)
    finally:
        metrics = job.metrics()
        job.stop()
    print(
        f"records: {metrics.data_records} data, {metrics.control_records} control, "
        f"{metrics.malformed_records} malformed; control records skipped: "
        f"{_skipped(metrics.rejected_control_records)}; sessions written: {len(job.sessions())}"
    )
    return 0


@contextmanager
def _stop_signals() -> Iterator[threading.Event]:
    """SIGINT (Ctrl-C) and SIGTERM (``kill``, Kubernetes) set the returned event, so the job
    stops cleanly: each query finishes its micro-batch and the summary is printed. Not an
    exception, which could land in the middle of a py4j call. The previous handlers are back on
    exit, so a second signal while the job stops acts as usual."""
    stop = threading.Event()
    if threading.current_thread() is not threading.main_thread():
        yield stop
        return
    signals = (signal.SIGINT, signal.SIGTERM)
    previous = {sig: signal.getsignal(sig) for sig in signals}
    for sig in signals:
        signal.signal(sig, lambda _sig, _frame: stop.set())
    try:
        yield stop
    finally:
        for sig, handler in previous.items():
            # None: a handler not installed from Python, which cannot be put back.
            signal.signal(sig, signal.SIG_DFL if handler is None else handler)


def _batch(args: argparse.Namespace) -> int:
    from progress_control_apps.spark.batch import run_batch
    from progress_control_apps.spark.source import KafkaSource

    root = args.output.rstrip("/")
    result = run_batch(
        _spark(args, "sessionization-batch"),
        KafkaSource(args.bootstrap_servers, args.topic, dict(args.kafka_option), args.schema),
        args.gap,
        f"{root}/sessions",
        _range(args),
        errors_path=f"{root}/errors",
        closed_only=args.closed_only,
        watermark_delay_ms=args.watermark_delay,
        trust=args.trust,
    )
    if result.value_schemas is not None:
        print(f"value schemas: {result.value_schemas.describe()}")
    print(
        f"sessions: {result.sessions} -> {result.sessions_path}; records: {result.data_records} "
        f"data, {result.control_records} control, {result.malformed_records} malformed "
        f"-> {result.errors_path}; control records skipped: "
        f"{_skipped(result.rejected_control_records)}"
    )
    return 0


def _reconcile(args: argparse.Namespace) -> int:
    from progress_control_apps.spark.reconcile import reconcile_topics
    from progress_control_apps.spark.source import KafkaSource

    report = reconcile_topics(
        _spark(args, "sessionization-reconcile"),
        KafkaSource(args.bootstrap_servers, args.topic, dict(args.kafka_option), args.schema),
        args.sessions_topic,
        args.gap,
        _range(args),
        grace_ms=args.grace,
        trust=args.trust,
    )
    print(report.summary())
    return 0 if report.equal else 1


def _skipped(rejected: Mapping[str, int]) -> str:
    if not rejected:
        return "none"
    return ", ".join(f"{count} {reason}" for reason, count in sorted(rejected.items()))


def _range(args: argparse.Namespace) -> BatchRange:
    from progress_control_apps.spark.batch import BatchRange

    try:
        return BatchRange(
            args.starting_offsets, args.ending_offsets, args.start_time, args.end_time
        )
    except ValueError as exc:
        raise SystemExit(
            f"python -m progress_control_apps.spark: error: --from/--to: {exc}"
        ) from exc


def _spark(args: argparse.Namespace, app_name: str) -> SparkSession:
    from progress_control_apps.spark.session import spark_session

    return spark_session(args.master, app_name, dict(args.conf))


def _duration(text: str) -> int:
    try:
        return parse_duration_ms(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from exc


def _positive_duration(text: str) -> int:
    millis = _duration(text)
    if millis <= 0:
        raise argparse.ArgumentTypeError(f"must be longer than 0: {text!r}")
    return millis


def _instant(text: str) -> int:
    try:
        return parse_instant_ms(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from exc


def _field_name(text: str) -> str:
    try:
        InputSchema(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc).partition(": ")[2]) from exc
    return text


def _key_value(text: str) -> tuple[str, str]:
    key, sep, value = text.partition("=")
    if not sep or not key.strip():
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE, got {text!r}")
    return key.strip(), value


def _spark_conf(text: str) -> tuple[str, str]:
    key, value = _key_value(text)
    if not key.startswith("spark."):
        raise argparse.ArgumentTypeError(f"Spark settings start with 'spark.', got {key!r}")
    return key, value
