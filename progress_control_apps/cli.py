"""``progress-control``: the project's command line."""

from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
import textwrap
import threading
from collections.abc import Sequence
from pathlib import Path

from progress_control import __version__
from progress_control.argtypes import positive_float, positive_int
from progress_control.extras import MissingExtraError, require_extra
from progress_control.logging import LOG_LEVELS, configure_logging, parse_log_level
from progress_control.settings import ConfigurationError
from progress_control_apps.dev.broker import BrokerStartError
from progress_control_apps.dev.jars import JarFetchError, MissingToolError
from progress_control_apps.dev.schema_registry import SchemaRegistryStartError

__all__ = ["main"]


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``progress-control`` console script."""
    parser = _parser()
    args = parser.parse_args(argv)
    if not getattr(args, "configures_logging", False):
        configure_logging(args.log_level or "INFO")
    try:
        code: int = args.handler(args)
    except (
        MissingToolError,
        JarFetchError,
        BrokerStartError,
        SchemaRegistryStartError,
        ConfigurationError,
        MissingExtraError,
    ) as exc:
        print(f"progress-control: error: {exc}", file=sys.stderr)
        return 2
    return code


def _log_level(value: str) -> str:
    try:
        return parse_log_level(value)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="progress-control",
        description="Stream time that keeps moving when data stops.",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    parser.add_argument(
        "--log-level",
        type=_log_level,
        metavar="LEVEL",
        help=f"one of {', '.join(LOG_LEVELS)} (default INFO)",
    )
    commands = parser.add_subparsers(required=True, metavar="COMMAND")

    demo = commands.add_parser(
        "demo",
        help="run the main job end to end on the embedded broker",
        description="Sparse clicks with and without progress control, sessionized by the "
        "streams runtime and by Spark; prints a report and writes a plot.",
    )
    demo.add_argument(
        "--bootstrap-servers", help="use this Kafka cluster instead of starting the embedded one"
    )
    demo.add_argument("--duration", type=positive_float, default=40.0, help="seconds of clicks")
    demo.add_argument("--users", type=positive_int, default=12, help="users clicking")
    demo.add_argument("--partitions", type=positive_int, default=4, help="click partitions")
    demo.add_argument("--gap", type=positive_float, default=4.0, help="session gap, seconds")
    demo.add_argument("--output-dir", type=Path, default=Path("out"), help="report and plot")
    demo.add_argument("--master", default="local[2]", help="Spark master (default local[2])")
    demo.add_argument("--no-spark", action="store_true", help="skip the Spark jobs")
    demo.add_argument(
        "--format",
        choices=("json", "avro"),
        default="json",
        help="the records on every topic: JSON, or Avro through a Schema Registry (default json)",
    )
    demo.add_argument(
        "--schema-registry-url",
        help="with --format avro: use this registry (Confluent's API) instead of the embedded one",
    )
    demo.set_defaults(handler=_demo, configures_logging=True)

    broker = commands.add_parser(
        "broker",
        help="run a single-node Kafka broker from Maven Central jars (foreground)",
        epilog=_broker_settings_help(),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    broker.add_argument("--port", type=int, help="client port (busy or unset: a free one)")
    broker.add_argument("--data-dir", type=Path, help="keep broker data here (default: temp)")
    broker.set_defaults(handler=_broker)

    registry = commands.add_parser(
        "schema-registry",
        help="run a Confluent-compatible Schema Registry (Apicurio, in memory; foreground)",
        description="Apicurio Registry from Maven Central, serving Confluent's Schema Registry "
        "API with in-memory storage; needs Java 21+.",
        epilog=_schema_registry_settings_help(),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    registry.add_argument("--port", type=int, help="API port (busy or unset: a free one)")
    registry.set_defaults(handler=_schema_registry)

    sidecar = commands.add_parser(
        "sidecar",
        help="run progress control as a standalone process (Kubernetes sidecar)",
        description=textwrap.fill(
            "Configured by PROGRESS_CONTROL_* env variables (listed below; `__` "
            "nests, e.g. PROGRESS_CONTROL_KAFKA__SASL_MECHANISM), then the YAML file named by "
            "PROGRESS_CONTROL_CONFIG_FILE (keys as the field names), then defaults; see the README."
        ),
        epilog=_sidecar_settings_help(),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sidecar.set_defaults(handler=_sidecar, configures_logging=True)

    run = commands.add_parser(
        "run",
        help="run a command with progress control attached to its confluent-kafka producers",
        description=textwrap.fill(
            "Zero-code attach: `progress-control run -- python app.py`. Settings come "
            "from PROGRESS_CONTROL_* env variables (listed below), or progress.control.* keys in "
            "a producer's config (PROGRESS_CONTROL_START_MS is progress.control.start.ms)."
        ),
        epilog=_run_settings_help(),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    run.add_argument("command", nargs=argparse.REMAINDER, help="the command, after --")
    run.set_defaults(handler=_run)

    autoload_path = commands.add_parser(
        "autoload-path", help="print the PYTHONPATH entry of the zero-code hook"
    )
    autoload_path.set_defaults(handler=_autoload_path)

    fetch = commands.add_parser("fetch-jars", help="fill the jar cache ahead of time")
    fetch.add_argument("which", choices=["kafka", "spark"], nargs="+")
    fetch.set_defaults(handler=_fetch_jars)
    return parser


# Each command's settings, listed by its --help from the settings classes themselves.


def _sidecar_settings_help() -> str:
    from progress_control.settings_help import settings_help
    from sidecar.settings import SidecarSettings

    return settings_help(SidecarSettings, "settings (env variable, default, description):")


def _run_settings_help() -> str:
    from interceptor.settings import InterceptorSettings
    from progress_control.settings_help import settings_help

    return settings_help(InterceptorSettings, "settings (env variable, default, description):")


def _broker_settings_help() -> str:
    from progress_control.settings_help import settings_help
    from progress_control_apps.dev.broker import BrokerSettings

    return settings_help(BrokerSettings, "settings (env variable, default, description):")


def _schema_registry_settings_help() -> str:
    from progress_control.settings_help import settings_help
    from progress_control_apps.dev.schema_registry import SchemaRegistrySettings

    return settings_help(SchemaRegistrySettings, "settings (env variable, default, description):")


def _demo(args: argparse.Namespace) -> int:
    require_extra("demo", "the demo", "matplotlib", *([] if args.no_spark else ["pyspark"]))
    from progress_control_apps.demo.demo import DemoOptions, run_demo
    from progress_control_apps.demo.logs import demo_logging

    log_dir = args.output_dir / "logs"
    options = DemoOptions(
        duration_s=args.duration,
        users=args.users,
        partitions=args.partitions,
        gap_s=args.gap,
        output_dir=args.output_dir,
        spark=not args.no_spark,
        master=args.master,
        bootstrap_servers=args.bootstrap_servers,
        log_dir=log_dir,
        wire_format=args.format,
        schema_registry_url=args.schema_registry_url,
    )
    if options.duration_s < 3 * options.gap_s:
        raise ConfigurationError("--duration must be at least three --gap long")
    # The step display and the report are the demo's output. Logs go to files under log_dir;
    # the terminal gets Python errors only, unless --log-level asks for more.
    try:
        with demo_logging(log_dir, args.log_level):
            return run_demo(sys.stdout, options)
    except Exception:
        print(f"progress-control demo: failed; the logs are in {log_dir}", file=sys.stderr)
        raise


def _broker(args: argparse.Namespace) -> int:
    from progress_control.settings import load_settings
    from progress_control_apps.dev.broker import BrokerSettings, EmbeddedKafkaBroker

    overrides: dict[str, object] = {}
    if args.port is not None:
        overrides["port"] = args.port
    if args.data_dir is not None:
        overrides["data_dir"] = args.data_dir
    stop = threading.Event()
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, lambda *_: stop.set())
    broker = EmbeddedKafkaBroker(load_settings(BrokerSettings, **overrides))
    print("Starting Kafka broker (first run fetches its jars)...", file=sys.stderr, flush=True)
    with broker:
        print(f"Kafka broker ready: bootstrap.servers={broker.bootstrap_servers}", flush=True)
        print(f"Broker log: {broker.log_path}. Press Ctrl-C to stop.", file=sys.stderr, flush=True)
        while not stop.wait(1.0):
            if not broker.is_running:
                print(f"Kafka broker exited unexpectedly:\n{broker.log_tail()}", file=sys.stderr)
                return 1
        print("Stopping Kafka broker...", file=sys.stderr, flush=True)
    return 0


def _schema_registry(args: argparse.Namespace) -> int:
    from progress_control.settings import load_settings
    from progress_control_apps.dev.schema_registry import (
        EmbeddedSchemaRegistry,
        SchemaRegistrySettings,
    )

    overrides: dict[str, object] = {}
    if args.port is not None:
        overrides["port"] = args.port
    stop = threading.Event()
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, lambda *_: stop.set())
    registry = EmbeddedSchemaRegistry(load_settings(SchemaRegistrySettings, **overrides))
    print(
        "Starting the schema registry (first run fetches Apicurio Registry)...",
        file=sys.stderr,
        flush=True,
    )
    with registry:
        print(f"Schema registry ready: url={registry.url}", flush=True)
        print(
            f"Registry log: {registry.log_path}. Press Ctrl-C to stop.", file=sys.stderr, flush=True
        )
        while not stop.wait(1.0):
            if not registry.is_running:
                print(
                    f"Schema registry exited unexpectedly:\n{registry.log_tail()}", file=sys.stderr
                )
                return 1
        print("Stopping the schema registry...", file=sys.stderr, flush=True)
    return 0


def _sidecar(args: argparse.Namespace) -> int:
    from sidecar.settings import LogFormat, SidecarSettings

    settings = SidecarSettings.from_config({})
    json_logs = (
        None if settings.log_format is LogFormat.AUTO else settings.log_format is LogFormat.JSON
    )
    configure_logging(args.log_level or settings.log_level, json=json_logs)
    from sidecar.service import ProgressControlSidecar

    stop = threading.Event()
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, lambda *_: stop.set())
    sidecar = ProgressControlSidecar(settings).start()
    # A log line, so a JSON log stream holds nothing else.
    logging.getLogger("sidecar").info("serving HTTP on port %(port)d", {"port": sidecar.http.port})
    # Woken now and then: a signal the kernel delivered to another thread only runs its Python
    # handler once the main thread is back in the interpreter, and a bare wait() never is.
    while not stop.wait(0.5):
        pass
    # A hard bound on the whole exit, librdkafka's teardown included: the clean stop below
    # takes at most 80% of shutdown_timeout_s; should anything hang, SIGALRM ends the process.
    signal.setitimer(signal.ITIMER_REAL, settings.shutdown_timeout_s)
    sidecar.stop()
    return 0


def _run(args: argparse.Namespace) -> int:
    from interceptor.autoload import site_dir

    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        print("progress-control run: give a command, e.g. `-- python app.py`", file=sys.stderr)
        return 2
    if Path(command[0]).name == "opentelemetry-instrument":
        # Its sitecustomize would go in front of ours and not run the ones after it: the app
        # would run without progress control, and nothing would say so.
        print(
            "progress-control run: put opentelemetry-instrument outside, "
            "`opentelemetry-instrument progress-control run -- python app.py`",
            file=sys.stderr,
        )
        return 2
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(site_dir()), env.get("PYTHONPATH")]))
    env["PROGRESS_CONTROL_AUTOLOAD"] = "1"
    # Validate the settings now, so a typo fails here with the setting's name, not in the app.
    from interceptor.settings import InterceptorSettings

    InterceptorSettings.from_config({})
    try:
        os.execvpe(command[0], command, env)  # noqa: S606 - running the user's command is the point
    except FileNotFoundError:
        # As a shell says it, with a shell's exit codes: 127 not found, 126 not executable.
        print(f"progress-control run: {command[0]}: command not found", file=sys.stderr)
        return 127
    except PermissionError:
        print(f"progress-control run: {command[0]}: permission denied", file=sys.stderr)
        return 126
    except OSError as exc:
        print(f"progress-control run: {command[0]}: {exc.strerror}", file=sys.stderr)
        return 126


def _autoload_path(_args: argparse.Namespace) -> int:
    from interceptor.autoload import site_dir

    print(site_dir())
    return 0


def _fetch_jars(args: argparse.Namespace) -> int:
    from progress_control_apps.dev.jars import (
        fetch_jars,
        kafka_broker_jars,
        spark_kafka_connector_jars,
    )

    if "spark" in args.which:
        require_extra("spark", "fetch-jars spark", "pyspark")
    for which in args.which:
        jar_set = kafka_broker_jars() if which == "kafka" else spark_kafka_connector_jars()
        print(fetch_jars(jar_set))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
