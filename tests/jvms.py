"""The JVMs tests start: their options (:data:`TEST_JVM_OPTIONS`), one launcher for the Java
programs tests drive over stdin and stdout (:func:`start_driven_jvm`: the Kafka Streams
conformance app, the Kafka Streams companion's example app, the Flink companion's example job),
and stopping them (:func:`stop_child`)."""

from __future__ import annotations

import contextlib
import subprocess
from pathlib import Path
from typing import IO, Any

from progress_control_apps.dev.jars import find_java

__all__ = ["TEST_JVM_OPTIONS", "start_driven_jvm", "stop_child"]

TEST_JVM_OPTIONS = ("-XX:TieredStopAtLevel=1", "-XX:+UseSerialGC")
"""The JVMs tests start (Kafka Streams, Connect, Flink): C1 only and the serial collector, as
Spark's in tests/conftest.py. Short lives on small data spend most of their CPU compiling and
collecting; neither flag changes what the program computes."""


def start_driven_jvm(
    jars: Path, main_class: str, *args: str, max_heap: str, log_path: Path
) -> tuple[subprocess.Popen[str], IO[str]]:
    """Start ``main_class`` with ``args`` on the jars in the directory ``jars``, with the tests'
    options, a heap of at most ``max_heap`` (``-Xmx``: the one thing its callers set apart) and
    SLF4J's simple logger at WARN. The test drives it over its stdin and stdout (text, line by
    line); its log (stderr) goes to ``log_path``. Returns the process and its open log, for
    :func:`stop_child`."""
    log = log_path.open("w")
    process = subprocess.Popen(
        [
            str(find_java()),
            *TEST_JVM_OPTIONS,
            f"-Xmx{max_heap}",
            "-Dorg.slf4j.simpleLogger.defaultLogLevel=warn",
            "-cp",
            f"{jars}/*",
            main_class,
            *args,
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=log,
        text=True,
        bufsize=1,
    )
    return process, log


def stop_child(process: subprocess.Popen[Any], log: IO[Any]) -> None:
    """Stop a child JVM that runs until its stdin closes (the Kafka Streams and Flink apps the
    tests drive): close stdin, wait a minute, kill it if it is still there; close its log."""
    try:
        if process.stdin is not None and not process.stdin.closed:
            with contextlib.suppress(BrokenPipeError):
                process.stdin.close()
        process.wait(timeout=60)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()
    finally:
        log.close()
