"""Native ack recording: librdkafka's own interceptor API records every ack in C.

:mod:`interceptor._ackplugin` (built from ``_ackplugin.c`` when a C compiler was there at install)
is both a Python extension and a librdkafka plugin. A producer using it lists the module's file in
``plugin.library.paths`` (after any plugins of the user's) and binds its own
:class:`~interceptor._ackplugin.AckTable` with ``progress.control.ack.table``; librdkafka then
calls the plugin's ``on_acknowledgement`` on its broker threads, which stores each partition's last
successful ack with no Python call per record. The scheduler thread drains the table.

The plugin does not link against librdkafka: the wheel's copy has a hashed file name and is loaded
``RTLD_LOCAL``. :func:`find_librdkafka` finds the copy ``confluent_kafka.cimpl`` loaded, ctypes
opens that same copy (``RTLD_NOLOAD``: never a second one) and the plugin is handed the addresses
of the few functions it calls. When any step fails, producers record acks in Python instead
(:func:`native_acks` says why, once, in the log).
"""

from __future__ import annotations

import ctypes
import logging
import os
import re
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Protocol

import confluent_kafka

from interceptor.settings import AckRecording
from progress_control.settings import ConfigurationError

__all__ = [
    "PLUGIN_PATHS",
    "AckTableLike",
    "NativeAcks",
    "find_librdkafka",
    "librdkafka_paths_in_maps",
    "native_acks",
    "with_plugin",
]

logger = logging.getLogger(__name__)

PLUGIN_PATHS = "plugin.library.paths"

# In the order _ackplugin.bind() takes them.
_FUNCTIONS = (
    "rd_kafka_conf_interceptor_add_on_conf_set",
    "rd_kafka_conf_interceptor_add_on_conf_dup",
    "rd_kafka_conf_interceptor_add_on_conf_destroy",
    "rd_kafka_conf_interceptor_add_on_new",
    "rd_kafka_interceptor_add_on_acknowledgement",
    "rd_kafka_interceptor_add_on_send",
    "rd_kafka_topic_name",
    "rd_kafka_message_timestamp",
)
_LIBRDKAFKA_NAME = re.compile(r"^librdkafka(-[0-9a-f]+)?\.so(\.\d+)*$")


class AckTableLike(Protocol):
    """What a producer uses of :class:`interceptor._ackplugin.AckTable`."""

    @property
    def id(self) -> int: ...

    def drain(self) -> list[tuple[str, int, int, int, float, int]]: ...

    def in_flight(self) -> dict[str, int]: ...

    def stats(self) -> dict[str, int]: ...


def librdkafka_paths_in_maps(maps: str) -> list[str]:
    """The distinct librdkafka files mapped, in ``/proc/<pid>/maps`` text, in order seen."""
    paths: list[str] = []
    for line in maps.splitlines():
        fields = line.split(maxsplit=5)
        if len(fields) == 6 and fields[5].startswith("/"):
            path = fields[5].strip()
            if _LIBRDKAFKA_NAME.match(os.path.basename(path)) and path not in paths:
                paths.append(path)
    return paths


_PACKAGE_DIR = Path(confluent_kafka.__file__).resolve().parent


def find_librdkafka(
    maps_file: Path = Path("/proc/self/maps"), package_dir: Path = _PACKAGE_DIR
) -> str | None:
    """The librdkafka file ``confluent_kafka.cimpl`` loaded, ``None`` when that is unclear.

    The process's mappings name it; when several librdkafka files are mapped, the one bundled
    with confluent-kafka's wheel (``confluent_kafka.libs/``) is cimpl's. Without ``/proc``, the
    wheel's bundled copy (loaded since cimpl was imported).
    """
    try:
        mapped = librdkafka_paths_in_maps(maps_file.read_text(encoding="utf-8", errors="replace"))
    except OSError:
        mapped = []
    bundled_dir = str(package_dir.parent / "confluent_kafka.libs") + os.sep
    if len(mapped) == 1:
        return mapped[0]
    bundled = [p for p in mapped if p.startswith(bundled_dir)]
    if len(bundled) == 1:
        return bundled[0]
    if mapped:
        return None  # several candidates, none clearly cimpl's
    on_disk = sorted(Path(bundled_dir).glob("librdkafka*.so*"))
    return str(on_disk[0]) if len(on_disk) == 1 else None


class NativeAcks:
    """The loaded plugin: new ack tables, and producer configs that load and bind it."""

    def __init__(self, module: Any) -> None:
        self._module = module
        self.plugin_path: str = str(Path(module.__file__).resolve())
        self.table_property: str = str(module.TABLE_PROPERTY)

    def new_table(self) -> AckTableLike:
        table: AckTableLike = self._module.AckTable()
        return table

    def producer_config(self, config: Mapping[str, Any], table: AckTableLike) -> dict[str, Any]:
        """``config`` loading the plugin bound to ``table``: see :func:`with_plugin`."""
        return with_plugin(config, self.plugin_path, self.table_property, table.id)


def with_plugin(
    config: Mapping[str, Any], plugin_path: str, table_property: str, table_id: int
) -> dict[str, Any]:
    """A copy of ``config`` whose ``plugin.library.paths`` ends with ``plugin_path`` (after the
    user's own), then ``table_property``: librdkafka sets properties in the dict's order, and the
    plugin can claim its property only once loaded."""
    result = {k: v for k, v in config.items() if k != PLUGIN_PATHS}
    theirs = str(config.get(PLUGIN_PATHS) or "").rstrip("; ")  # as the user wrote them
    result[PLUGIN_PATHS] = f"{theirs};{plugin_path}" if theirs else plugin_path
    result[table_property] = str(table_id)
    return result


def _bind(module: Any) -> None:
    path = find_librdkafka()
    if path is None:
        raise OSError("cannot tell which librdkafka confluent_kafka.cimpl loaded")
    # RTLD_NOLOAD: the copy cimpl uses, or nothing (never a second copy with its own state).
    library = ctypes.CDLL(path, mode=os.RTLD_NOLOAD | os.RTLD_LOCAL)
    version = library.rd_kafka_version
    version.restype = ctypes.c_int
    if version() < 0x000B0000:  # interceptors and plugins arrived in 0.11
        raise OSError(f"{path}: librdkafka too old for interceptors")
    addresses = [ctypes.cast(getattr(library, name), ctypes.c_void_p).value for name in _FUNCTIONS]
    module.bind(*addresses)
    _self_test(library, module)


def _self_test(library: ctypes.CDLL, module: Any) -> None:
    """Load the plugin into a throwaway configuration and bind a table, as a producer will."""
    library.rd_kafka_conf_new.restype = ctypes.c_void_p
    library.rd_kafka_conf_set.argtypes = [
        ctypes.c_void_p,
        ctypes.c_char_p,
        ctypes.c_char_p,
        ctypes.c_char_p,
        ctypes.c_size_t,
    ]
    library.rd_kafka_conf_set.restype = ctypes.c_int
    library.rd_kafka_conf_destroy.argtypes = [ctypes.c_void_p]
    table = module.AckTable()
    conf = library.rd_kafka_conf_new()
    errstr = ctypes.create_string_buffer(512)
    try:
        for name, value in with_plugin(
            {}, str(Path(module.__file__).resolve()), module.TABLE_PROPERTY, table.id
        ).items():
            if library.rd_kafka_conf_set(conf, name.encode(), value.encode(), errstr, 512) != 0:
                raise OSError(f"{name}: {errstr.value.decode(errors='replace')}")
    finally:
        library.rd_kafka_conf_destroy(conf)
    if table.stats()["references"] != 1:
        raise OSError("the plugin kept a reference to a destroyed configuration's table")


_lock = threading.Lock()
_loaded: NativeAcks | None = None
_failure: str | None = None
_logged: set[AckRecording] = set()


def _load() -> NativeAcks | None:
    """Import and bind the plugin once per process; remember why not."""
    global _loaded, _failure  # noqa: PLW0603 - a process-wide, once-only load
    with _lock:
        if _loaded is None and _failure is None:
            try:
                from interceptor import _ackplugin  # type: ignore[attr-defined]

                _bind(_ackplugin)
                _loaded = NativeAcks(_ackplugin)
            except Exception as exc:  # ImportError: built without a compiler
                _failure = f"{type(exc).__name__}: {exc}"
        return _loaded


def unavailable_reason() -> str | None:
    """Why native recording is unavailable in this process (``None`` when it is available)."""
    _load()
    return _failure


def native_acks(choice: AckRecording) -> NativeAcks | None:
    """The plugin when ``choice`` lets producers use it, ``None`` for recording in Python.

    ``auto`` falls back to Python when the plugin is unavailable, ``native`` raises
    :class:`ConfigurationError` then, ``python`` never loads it. Which path is used is logged
    once per process and choice.
    """
    native = None if choice is AckRecording.PYTHON else _load()
    if native is None and choice is AckRecording.NATIVE:
        raise ConfigurationError(
            f"progress.control.ack.recording=native: the native ack recorder is unavailable "
            f"({_failure})"
        )
    with _lock:
        if choice not in _logged:
            _logged.add(choice)
            if native is not None:
                logger.info("progress control records acks natively (librdkafka interceptor)")
            elif choice is AckRecording.PYTHON:
                logger.info("progress control records acks in Python (ack.recording=python)")
            else:
                logger.warning(
                    "progress control records acks in Python: native recorder unavailable "
                    "(%(reason)s)",
                    {"reason": _failure},
                )
    return native
