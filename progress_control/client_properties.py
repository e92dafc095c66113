"""Kafka client properties checked against librdkafka's own before any client is made.

A misspelt property (``sasl.mechanismx``) or a value librdkafka refuses (``acks=most``) would
otherwise surface when the first client is created, deep in a component's start, as a traceback.
:func:`client_property_problems` asks the librdkafka that confluent-kafka loaded (through
``rd_kafka_conf_set`` on a configuration object of its own, which no client ever uses: nothing
connects, nothing starts) and returns one line per problem, naming the property and, for a
misspelling, the closest real one.

:data:`ClientProperties` is the settings type of such properties: a
:data:`~progress_control.kafka_properties.KafkaProperties` validated this way. Properties of the
Java clients and of the broker (Spark's Kafka options, the embedded broker's and registry's) are
not librdkafka's and keep :data:`~progress_control.kafka_properties.KafkaProperties`.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import difflib
import functools
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any

import confluent_kafka
from pydantic import AfterValidator

from progress_control.kafka_properties import KafkaProperties, is_secret_property

__all__ = ["ClientProperties", "checked_client_properties", "client_property_problems"]

_CONF_OK, _CONF_UNKNOWN = 0, -2  # rd_kafka_conf_res_t; -1 is an invalid value
_ERRSTR_SIZE = 512

_PYTHON_ONLY = frozenset(
    {
        "error_cb",
        "throttle_cb",
        "stats_cb",
        "oauth_cb",
        "logger",
        "on_delivery",
        "on_commit",
        "delivery.report.only.error",
        "key.serializer",
        "value.serializer",
        "key.deserializer",
        "value.deserializer",
    }
)
"""Keys confluent-kafka takes itself and never hands to librdkafka."""

_NOT_SET_HERE = ("plugin.",)
"""Prefixes of properties whose setting has an effect of its own (a plugin library is loaded
when ``plugin.library.paths`` is set): left to the client, which reports them as clearly."""


class _Librdkafka:
    """The few functions of librdkafka's configuration API the check needs."""

    def __init__(self, library: ctypes.CDLL) -> None:
        void_p, char_p = ctypes.c_void_p, ctypes.c_char_p
        self._new = library.rd_kafka_conf_new
        self._new.restype, self._new.argtypes = void_p, []
        self._set = library.rd_kafka_conf_set
        self._set.restype = ctypes.c_int
        self._set.argtypes = [void_p, char_p, char_p, char_p, ctypes.c_size_t]
        self._destroy = library.rd_kafka_conf_destroy
        self._destroy.restype, self._destroy.argtypes = None, [void_p]
        self._dump = library.rd_kafka_conf_dump
        self._dump.restype = ctypes.POINTER(char_p)
        self._dump.argtypes = [void_p, ctypes.POINTER(ctypes.c_size_t)]
        self._dump_free = library.rd_kafka_conf_dump_free
        self._dump_free.restype = None
        self._dump_free.argtypes = [ctypes.POINTER(char_p), ctypes.c_size_t]

    def problems(self, properties: Mapping[str, str]) -> list[tuple[str, int, str]]:
        """``(name, result, librdkafka's message)`` of each property it did not take."""
        conf = self._new()
        try:
            found = []
            errstr = ctypes.create_string_buffer(_ERRSTR_SIZE)
            for name, value in properties.items():
                result = self._set(conf, name.encode(), value.encode(), errstr, _ERRSTR_SIZE)
                if result != _CONF_OK:
                    found.append((name, result, errstr.value.decode(errors="replace")))
            return found
        finally:
            self._destroy(conf)

    @functools.cached_property
    def names(self) -> list[str]:
        """The names of the properties a new configuration holds a value of (the defaults):
        candidates for "did you mean"."""
        conf = self._new()
        try:
            count = ctypes.c_size_t()
            dumped = self._dump(conf, ctypes.byref(count))
            try:
                # Name, value, name, value...
                return [(dumped[i] or b"").decode() for i in range(0, count.value, 2)]
            finally:
                self._dump_free(dumped, count)
        finally:
            self._destroy(conf)


@functools.cache
def _librdkafka() -> _Librdkafka | None:
    """The librdkafka confluent-kafka's extension is linked with: the wheel's bundled copy, else
    the system's; ``None`` where neither is found (the clients then report problems)."""
    package = Path(confluent_kafka.__file__).parent
    bundled = sorted(
        [
            *package.parent.glob("confluent_kafka.libs/librdkafka*"),
            *package.glob(".dylibs/librdkafka*"),
        ]
    )
    name = str(bundled[0]) if bundled else ctypes.util.find_library("rdkafka")
    if name is None:
        return None
    try:
        return _Librdkafka(ctypes.CDLL(name))
    except (OSError, AttributeError):
        return None


def client_property_problems(properties: Mapping[str, Any]) -> list[str]:
    """One line per property librdkafka does not know or whose value it refuses; empty when all
    are fine or librdkafka's configuration API cannot be reached. Secret values never show.
    Values are taken as confluent-kafka hands them on (``True`` is ``"true"``); callables
    (callbacks) are confluent-kafka's own and not checked."""
    library = _librdkafka()
    if library is None:
        return []
    checked = {
        name: (str(value).lower() if isinstance(value, bool) else str(value))
        for name, value in properties.items()
        if name not in _PYTHON_ONLY
        and not name.startswith(_NOT_SET_HERE)
        and isinstance(value, str | int | float)
    }
    lines = []
    for name, result, message in library.problems(checked):
        if result == _CONF_UNKNOWN:
            close = difflib.get_close_matches(name, library.names, n=1)
            hint = f"; did you mean {close[0]!r}?" if close else ""
            lines.append(
                f"unknown Kafka client property {name!r} "
                f"(librdkafka {confluent_kafka.libversion()[0]}){hint}"
            )
        elif is_secret_property(name):
            lines.append(f"invalid value for Kafka client property {name!r}")
        else:
            lines.append(f"Kafka client property {name!r}: {message}")
    return lines


def checked_client_properties(properties: dict[str, str]) -> dict[str, str]:
    """``properties`` when librdkafka takes them all, else ``ValueError`` with every problem
    (:func:`client_property_problems`): the validator of :data:`ClientProperties`, for types
    that check something of their own first."""
    problems = client_property_problems(properties)
    if problems:
        raise ValueError("; ".join(problems))
    return properties


ClientProperties = Annotated[KafkaProperties, AfterValidator(checked_client_properties)]
"""The settings type of librdkafka client properties: :data:`KafkaProperties` whose names and
values librdkafka takes (:func:`client_property_problems`), checked when settings load."""
