"""Quix Streams 3.x: control records close windows and never reach user functions.

The change in a Quix Streams app is its import (docs: readers/quix-streams.md)::

    from progress_control.readers.quix import Application   # instead of quixstreams'

How Quix Streams 3.28 closes windows: only inside a window's ``process_window``, when a record
reaches the window. A time window (tumbling, hopping) or session window advances its clock per
message key (``closing_strategy="key"``, the default) or per partition (``"partition"``), and
that call both aggregates the record and expires what is due. A raw tick (sentinel key, value
``None``) would therefore hit every ``filter``/``apply`` before the window, open a window of its
own for the sentinel key, and be aggregated by every reducer.

So ticks take another path. :class:`Application` wraps each node of the app's stream graph when
``run()`` starts (the graph is complete then), before Quix composes it:

- the root node checks the ``progress-control`` header and validates the record
  (:class:`~progress_control.readers.tick_gate.TickGate`, our trust rules); a rejected one is
  dropped there, an accepted one goes on as a :class:`Tick` value;
- ordinary nodes (``filter``, ``apply``, ``update``, ``to_topic``, sinks) pass a tick to their
  children without calling their function;
- a time or session window expires every window of the partition that the tick's timestamp
  closes, using the window's own expiry methods on its own state transaction, and sends the
  closed windows downstream as ordinary results (``final()``; ``current()`` only drops them, as
  Quix does). The tick stops there: a window's output is stamped with its start, so passing the
  tick on would break the promise downstream (docs: concepts/promise.md).

A tick promises that no older record follows on its partition, so it closes the windows of
every key of the partition under either closing strategy. Under ``"partition"`` it also
advances the partition's clock (sessions), so later records are judged late against it as
against a record. Not covered: sliding windows (their expiry is per key only; ticks pass
them by, logged once), count windows (not time), and ``group_by``: Quix's repartition producer
writes no ticks, so windows after a ``group_by`` wait for data as before.

Quix Streams 3.28 cannot share a virtualenv with this project's core (it pins
``confluent-kafka<2.13``, ``pydantic<2.14``, ``pydantic-settings<2.16``); this module needs only
our protocol and trust modules (stdlib and structlog), so it runs in the app's own environment
(install: docs/readers/quix-streams.md). Hooks used beyond Quix's documented API, all checked by
tests/readers/test_quix.py against 3.28.1: ``Stream.full_tree``, ``StreamFunction``, a window's
``expire_by_key``/``expire_by_partition`` and the state transaction's ``iter_prefixes``/
``as_state``/``advance_partition_timestamp``/``get_latest_expired``.
"""

from __future__ import annotations

import copy
import inspect
import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from progress_control.readers.tick_gate import TickDecision, TickGate, TickGateStats
from progress_control.trust import TrustPolicy

try:
    import quixstreams
    from quixstreams.context import message_context
    from quixstreams.core.stream.functions import StreamFunction
    from quixstreams.dataframe.windows.base import Window
    from quixstreams.dataframe.windows.session import SessionWindow
    from quixstreams.dataframe.windows.sliding import SlidingWindow
    from quixstreams.dataframe.windows.time_based import ClosingStrategy, FixedTimeWindow
    from quixstreams.models.serializers import BytesDeserializer, Deserializer
except ModuleNotFoundError as exc:  # pragma: no cover - depends on the environment
    raise ModuleNotFoundError(
        "progress_control.readers.quix needs Quix Streams 3.x in the same environment: "
        "pip install 'quixstreams>=3.28,<4' structlog, then this package with --no-deps "
        "(see docs/readers/quix-streams.md: Quix Streams' pins conflict with our core's)",
        name=exc.name,
    ) from exc

__all__ = ["Application", "Tick"]

logger = logging.getLogger(__name__)

Executor = Callable[[Any, Any, int, Any], None]
WindowResults = list[tuple[Any, dict[str, Any]]]


@dataclass(frozen=True, slots=True)
class Tick:
    """The value a control record carries through the stream graph (never to user functions)."""

    timestamp_ms: int


class _ControlAwareKeyDeserializer(Deserializer):  # type: ignore[misc]
    """The topic's key deserializer, except for records with our header: their sentinel key is
    not the app's key type (an ``"integer"`` key deserializer would fail on it)."""

    def __init__(self, inner: Any) -> None:
        super().__init__()
        self._inner = inner

    @property
    def split_values(self) -> bool:
        return bool(self._inner.split_values)

    def __call__(self, value: bytes, ctx: Any) -> Any:
        if _has_header(ctx.headers):
            return value
        return self._inner(value, ctx=ctx)


def _has_header(headers: Any) -> bool:
    from progress_control.protocol import has_control_header

    return has_control_header(headers)


class Application(quixstreams.Application):  # type: ignore[misc]
    """``quixstreams.Application`` whose windows close on control records.

    Takes every argument of ``quixstreams.Application``, plus ``progress_control``: the
    :class:`~progress_control.trust.TrustPolicy` ticks must pass (default: the skew check only;
    give ``verification_keys`` to accept only signed ticks).
    """

    def __init__(self, *args: Any, progress_control: TrustPolicy | None = None, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.tick_gate = TickGate(progress_control)
        self._roots: list[Any] = []

    @property
    def tick_stats(self) -> TickGateStats:
        """Ticks accepted and skipped (per reason) so far."""
        return self.tick_gate.stats

    def topic(self, *args: Any, **kwargs: Any) -> Any:
        """As ``quixstreams.Application.topic``; ticks' keys bypass the key deserializer."""
        topic = super().topic(*args, **kwargs)
        if not isinstance(topic._key_deserializer, _ControlAwareKeyDeserializer):
            topic._key_deserializer = _ControlAwareKeyDeserializer(topic._key_deserializer)
        return topic

    def dataframe(self, *args: Any, **kwargs: Any) -> Any:
        """As ``quixstreams.Application.dataframe``; remembers the root to route ticks from."""
        sdf = super().dataframe(*args, **kwargs)
        self._roots.append(sdf.stream)
        return sdf

    def run(self, *args: Any, **kwargs: Any) -> Any:
        """As ``quixstreams.Application.run``, with ticks routed through the finished graph."""
        for root in self._roots:
            _route_ticks(root, self.tick_gate)
        return super().run(*args, **kwargs)


def _route_ticks(root: Any, gate: TickGate) -> None:
    """Wrap every node of ``root``'s graph once (``run`` may be called again)."""
    for stream in root.full_tree():
        if isinstance(stream.func, _TickAwareFunction):
            continue
        window, emits = _window_of(stream.func)
        if window is not None:
            stream.func = _TickAwareFunction(stream.func, _WindowCloser(window, emits))
        elif not stream.parents:
            stream.func = _TickAwareFunction(stream.func, gate=gate)
        else:
            stream.func = _TickAwareFunction(stream.func)


def _window_of(func: Any) -> tuple[Any, bool]:
    """The window a graph node applies (``Window._apply_window`` adds a transform wrapping the
    ``final``/``current`` callback, a closure over the window), and whether it emits closed
    windows (``final``); ``(None, False)`` for other nodes."""
    callback = getattr(getattr(func, "func", None), "__wrapped__", None)
    if callback is None or not callable(callback):
        return None, False
    try:
        window = inspect.getclosurevars(callback).nonlocals.get("self")
    except (TypeError, ValueError):
        return None, False
    if not isinstance(window, Window):
        return None, False
    return window, ".final." in callback.__qualname__


class _TickAwareFunction(StreamFunction):  # type: ignore[misc]
    """A graph node that runs its function for data and routes ticks around it."""

    def __init__(
        self, inner: Any, closer: _WindowCloser | None = None, *, gate: TickGate | None = None
    ) -> None:
        super().__init__(inner.func)
        self.inner = inner
        self.expand = inner.expand
        self._closer = closer
        self._gate = gate

    def get_executor(self, *child_executors: Executor) -> Executor:
        run_data = self.inner.get_executor(*child_executors)
        # Ticks go only to our wrapped nodes, never to a sink or collector Quix put at a leaf.
        tick_children = [c for c in child_executors if getattr(c, "routes_ticks", False)]
        closer, gate = self._closer, self._gate

        def executor(value: Any, key: Any, timestamp: int, headers: Any) -> None:
            if gate is not None:
                ctx = message_context()
                decision = gate.decide(ctx.topic, ctx.partition, timestamp, headers)
                if decision is TickDecision.SKIP:
                    return
                if decision is TickDecision.TICK:
                    value = Tick(timestamp)
            if type(value) is not Tick:
                if closer is not None:
                    closer.bytes_keys = type(key) is bytes
                run_data(value, key, timestamp, headers)
            elif closer is not None:
                for window_key, result in closer.close(value.timestamp_ms):
                    _fan_out(child_executors, result, window_key, result["start"])
            else:
                for child in tick_children:
                    child(value, key, timestamp, headers)

        executor.routes_ticks = True  # type: ignore[attr-defined]
        return executor


def _fan_out(children: Iterable[Executor], value: Any, key: Any, timestamp: int) -> None:
    """Send one closed window downstream as Quix's window node does: a copy per extra branch."""
    for index, child in enumerate(children):
        child(value if index == 0 else copy.deepcopy(value), key, timestamp, None)


class _WindowCloser:
    """Expires the windows of one window node that a tick at ``T`` closes, on the partition of
    the message being processed, with the window's own expiry methods."""

    def __init__(self, window: Any, emits: bool) -> None:
        self.window = window
        self.emits = emits
        self.bytes_keys = _reads_bytes_keys(window)
        """Whether the keys reaching this window are ``bytes`` (Quix stores those verbatim as
        state prefixes, others serialized): from the topic's key deserializer, then from data."""
        self._warned = False

    def close(self, tick_ms: int) -> WindowResults:
        window = self.window
        if isinstance(window, SlidingWindow) or not isinstance(
            window, (FixedTimeWindow, SessionWindow)
        ):
            self._warn_unsupported()
            return []
        sdf = window._dataframe
        transaction = sdf.processing_context.checkpoint.get_store_transaction(
            stream_id=sdf.stream_id, partition=message_context().partition, store_name=window.name
        )
        by_partition = window._closing_strategy == ClosingStrategy.PARTITION
        if isinstance(window, SessionWindow):
            closed = self._close_sessions(transaction, tick_ms, by_partition)
        else:
            closed = self._close_fixed(transaction, tick_ms, by_partition)
        return closed if self.emits else []

    def _close_sessions(self, transaction: Any, tick_ms: int, by_partition: bool) -> WindowResults:
        window = self.window
        gap, grace = window._inactivity_gap_ms, window._grace_ms
        if by_partition:  # exactly what a record at tick_ms does, minus the aggregation
            watermark = transaction.advance_partition_timestamp(tick_ms)
            close_before = watermark - 2 * gap - grace
            return list(
                window.expire_by_partition(
                    transaction, watermark, close_before, window.collect, self._key_probe
                )
            )
        return self._sweep_keys(
            transaction,
            lambda state, key: window.expire_by_key(
                key, state, tick_ms - 2 * gap - grace, window.collect
            ),
        )

    def _close_fixed(self, transaction: Any, tick_ms: int, by_partition: bool) -> WindowResults:
        window = self.window
        grace, duration = window._grace_ms, window._duration_ms
        if by_partition:
            latest = max(tick_ms, transaction.get_latest_expired(prefix=b""))
            return list(
                window.expire_by_partition(
                    transaction, latest - grace, window.collect, self._key_probe
                )
            )
        return self._sweep_keys(
            transaction,
            lambda state, key: window.expire_by_key(
                key, state, tick_ms - grace - duration, window.collect
            ),
        )

    @property
    def _key_probe(self) -> Any:
        """What Quix's ``key_from_prefix`` reads the key type from (only ``bytes`` or not)."""
        return b"" if self.bytes_keys else _KEY_PROBE

    def _sweep_keys(
        self, transaction: Any, expire: Callable[[Any, Any], Iterable[tuple[Any, dict[str, Any]]]]
    ) -> WindowResults:
        """Per-key expiry for every key of the partition: the tick promises the whole
        partition, not one key."""
        closed: WindowResults = []
        for prefix in list(transaction.iter_prefixes()):
            key = transaction.key_from_prefix(prefix, self._key_probe)
            closed.extend(expire(transaction.as_state(prefix=prefix), key))
        return closed

    def _warn_unsupported(self) -> None:
        if not self._warned:
            self._warned = True
            logger.warning(
                "control records do not close %(kind)s windows (%(store)s): passed by",
                {"kind": type(self.window).__name__, "store": self.window.name},
            )


def _reads_bytes_keys(window: Any) -> bool:
    """Whether the topics feeding ``window`` deserialize keys to ``bytes`` (Quix's default)."""
    deserializers = [topic._key_deserializer for topic in window._dataframe.topics]
    inner = [getattr(d, "_inner", d) for d in deserializers]
    return bool(inner) and all(isinstance(d, BytesDeserializer) for d in inner)


class _KeyProbe:
    """Passed where Quix wants "the current message's key" only to learn its type: a tick has
    no key of the app's type. Not ``bytes``, so store prefixes are deserialized as Quix
    serializes non-bytes keys."""


_KEY_PROBE = _KeyProbe()
