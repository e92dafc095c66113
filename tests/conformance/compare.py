"""Compare the runtime's outputs with Kafka Streams' on the same input, allowing exactly the
documented differences (README, "Semantics and differences from Kafka Streams"):

1. **Control records never reach user code.** Kafka Streams reads a control record as an
   ordinary record keyed by the sentinel: it moves stream time there as it does in the runtime,
   and also produces output of its own under the sentinel key. That output is not expected from
   the runtime, which must write no data record under the sentinel key. The runtime's own control
   records on its outputs are not data and are left out.
2. **Emit-on-change (KIP-557).** A materialised table's update whose value equals the previous
   one and whose timestamp is strictly newer is not forwarded by the runtime; Kafka Streams
   forwards it. Such updates are found in Kafka Streams' table output (``Case.table_output``),
   and the records each of them gives in every output of the case (found by the input record's
   id) are not expected: one in a stream of the table or of a filter without old values (a
   rejected value repeated gives a second delete there), none in a filter with old values.

3. **Unjoined results also come out on ticks** (``Case.unjoined``). A left or outer
   stream-stream join emits a record that found no partner when a scan finds its window closed:
   both engines scan at in-order data records under the same condition, carrying that record's
   headers; the runtime also at control records (Kafka Streams reads them as null-valued data,
   which never scans). They are compared per key as a multiset without headers.

4. **Punctuations on a broker** (``Case.punctuated``). Kafka Streams' stream threads fire
   stream-time punctuators after a batch of records, its test driver after each record as the
   runtime does, and wall-clock punctuators follow a real clock on a broker, the drivers' wall
   clocks only as the input moves them: what punctuators forward (values ``p=...`` and
   ``w=...``) is compared between the drivers, not between broker runs (``broker=True``).
5. **Order by timing on a broker** (``Case.timing_ordered``). A foreign-key join's answers
   cross two topics between two tasks: on a broker, which comes first, and so the intermediate
   results and their order, depends on which task ran first, in either engine. The drivers
   compare them record for record; broker runs compare each key's final value.
6. **Windowed cogroups' shared store.** Every input of a windowed cogroup has its own
   aggregation processor judging lateness by its own stream time, in both engines; Kafka
   Streams' shared store also has a time of its own, the latest window (session) any of them
   wrote, and hides and refuses windows expired by it: exactly in its in-memory stores, by
   whole segments (a minute or more) in its RocksDB ones, so what it writes then depends on the
   store. The runtime reads and writes a window while the input's own stream time keeps it
   open. So the ``cogroup-tumbling`` and ``cogroup-session`` inputs bring an input's stream
   time up to the other's with a control record before its data (``inputs._cogroup_partition``),
   and per-input lateness is tested on the runtime's driver alone
   (tests/streams_runtime/topologies/test_cogroup_driver.py).

Everything else must be equal, per key in offset order: partition, key, value, timestamp and
headers (every input record carries an id header, which Kafka Streams passes on to the output
records it causes). Records with a null key are spread over partitions as each engine likes, so
their partition and order are not compared.
"""

from __future__ import annotations

import itertools
from collections import defaultdict
from dataclasses import dataclass

from tests.conformance.inputs import ID_HEADER, SENTINEL_KEY
from tests.conformance.topologies import Case

__all__ = ["OutputRecord", "differences", "final_results"]


@dataclass(frozen=True)
class OutputRecord:
    partition: int
    key: bytes | None
    value: bytes | None
    timestamp: int
    headers: tuple[tuple[str, bytes | None], ...] = ()
    control: bool = False

    def comparable(self) -> Comparable:
        partition = -1 if self.key is None else self.partition
        return (partition, self.key, self.value, self.timestamp, self.headers)

    @property
    def input_id(self) -> bytes | None:
        """The id of the input record that caused this one (its id header)."""
        return next((v for name, v in self.headers if name == ID_HEADER), None)


Comparable = tuple[int, bytes | None, bytes | None, int, tuple[tuple[str, bytes | None], ...]]


def _user_key(record: OutputRecord, window_bytes: int) -> bytes | None:
    """The key without its window suffix (``window_bytes`` long: a session-windowed key ends
    with the window's end and start, 16 bytes; a time-windowed one with its start, 8)."""
    if record.key is None or not window_bytes:
        return record.key
    return record.key[:-window_bytes]


def _window_bytes(case: Case) -> int:
    return case.window_bytes if case.windowed else 0


def _by_key(
    records: list[OutputRecord], window_bytes: int = 0
) -> dict[bytes | None, list[OutputRecord]]:
    """Records per user key (all windows of a key together), in offset order."""
    grouped: dict[bytes | None, list[OutputRecord]] = defaultdict(list)
    for record in records:
        grouped[_user_key(record, window_bytes)].append(record)
    return grouped


def _idempotent_updates(table: list[OutputRecord]) -> set[bytes | None]:
    """The ids of the input records whose table update emit-on-change does not forward: same
    value as the key's update before (a value, not a delete), strictly newer timestamp."""
    skipped: set[bytes | None] = set()
    for updates in _by_key(table).values():
        for before, update in itertools.pairwise(updates):
            if (
                before.value is not None
                and update.value == before.value
                and update.timestamp > before.timestamp
            ):
                skipped.add(update.input_id)
    return skipped


def expected_from_kafka_streams(
    case: Case, kafka_streams: dict[str, list[OutputRecord]]
) -> dict[str, dict[bytes | None, list[OutputRecord]]]:
    """What the runtime must write to each output, per key, given Kafka Streams' outputs."""
    data = {
        role: [r for r in records if _user_key(r, _window_bytes(case)) != SENTINEL_KEY]
        for role, records in kafka_streams.items()
    }
    skipped = _idempotent_updates(data[case.table_output]) if case.table_output else set()
    return {
        role: _by_key([r for r in records if r.input_id not in skipped], _window_bytes(case))
        for role, records in data.items()
    }


def differences(
    case: Case,
    kafka_streams: dict[str, list[OutputRecord]],
    runtime: dict[str, list[OutputRecord]],
    *,
    limit: int = 3,
    broker: bool = False,
) -> list[str]:
    """Every way the runtime's outputs differ from what Kafka Streams' outputs allow, readable;
    empty when they conform. ``broker``: outputs of broker runs, where what punctuators forward
    is left out and a case whose order is timing's compares final values (4. and 5. above)."""
    found: list[str] = []
    if broker and case.punctuated:
        kafka_streams, runtime = (
            _without_punctuations(kafka_streams),
            _without_punctuations(runtime),
        )
    if broker and case.timing_ordered:
        return [
            f"{case.name}/{role}: final values differ: Kafka Streams {want}, runtime {got}"
            for role in case.outputs
            if (want := _final_values(case, kafka_streams[role]))
            != (got := _final_values(case, runtime[role]))
        ][:limit]
    expected = expected_from_kafka_streams(case, kafka_streams)
    for role in case.outputs:
        data = [r for r in runtime[role] if not r.control]
        leaked = [r for r in data if _user_key(r, _window_bytes(case)) == SENTINEL_KEY]
        if leaked:
            found.append(f"{case.name}/{role}: {len(leaked)} data records under the sentinel key")
        actual = _by_key(data, _window_bytes(case))
        for key in sorted(set(expected[role]) | set(actual), key=lambda k: k or b""):
            want = [r.comparable() for r in expected[role].get(key, [])]
            got = [r.comparable() for r in actual.get(key, [])]
            if key is None:
                want, got = sorted(want, key=repr), sorted(got, key=repr)
            elif case.unjoined:
                want, got = _unjoined_last(want), _unjoined_last(got)
            if want != got:
                first = next(
                    (i for i, (w, g) in enumerate(zip(want, got, strict=False)) if w != g),
                    min(len(want), len(got)),
                )
                found.append(
                    f"{case.name}/{role} key {key!r}: first difference at #{first}\n"
                    f"  Kafka Streams ({len(want)}): {_show(want, first, _window_bytes(case))}\n"
                    f"  runtime       ({len(got)}): {_show(got, first, _window_bytes(case))}"
                )
                if len(found) >= limit:
                    return found
    return found


def _without_punctuations(outputs: dict[str, list[OutputRecord]]) -> dict[str, list[OutputRecord]]:
    return {
        role: [r for r in records if not (r.value or b"").startswith((b"p=", b"w="))]
        for role, records in outputs.items()
    }


def final_results(
    case: Case, records: list[OutputRecord]
) -> dict[bytes | None, tuple[bytes | None, int]]:
    """The last (value, timestamp) per key (window included) of an output's data records: what
    is comparable when record caches merge intermediate updates by commit timing."""
    window_bytes = _window_bytes(case)
    return {
        r.key: (r.value, r.timestamp)
        for r in records
        if not r.control and _user_key(r, window_bytes) != SENTINEL_KEY
    }


def _final_values(case: Case, records: list[OutputRecord]) -> dict[bytes | None, bytes]:
    """Each key's last value, keys whose last record deletes them left out."""
    return {
        key: value for key, (value, _) in final_results(case, records).items() if value is not None
    }


def _unjoined_last(records: list[Comparable]) -> list[Comparable]:
    """A key's join results: the joined ones in offset order, then the ones missing a side
    (``x|null``, ``null|x``) sorted and without headers (``Case.unjoined``)."""

    def unjoined(record: Comparable) -> bool:
        value = record[2] or b""
        return value.startswith(b"null|") or value.endswith(b"|null")

    rest: list[Comparable] = [
        (partition, key, value, timestamp, ())
        for partition, key, value, timestamp, _headers in records
        if unjoined((partition, key, value, timestamp, ()))
    ]
    return [r for r in records if not unjoined(r)] + sorted(rest, key=repr)


def _describe(record: Comparable, window_bytes: int) -> str:
    partition, key, value, timestamp, headers = record
    shown_key = repr(key)
    if window_bytes and key is not None:
        start = int.from_bytes(key[-8:], "big", signed=True)
        end = int.from_bytes(key[-16:-8], "big", signed=True) if window_bytes == 16 else "."
        shown_key = f"{key[:-window_bytes].decode(errors='replace')}[{start},{end}]"
    if value is not None and len(value) == 8 and not all(32 <= b < 127 for b in value):
        shown_value = str(int.from_bytes(value, "big", signed=True))
    else:
        shown_value = "null" if value is None else value.decode(errors="replace")
    ids = ",".join(v.decode(errors="replace") if v else "-" for _n, v in headers)
    return f"p{partition} {shown_key}={shown_value}@{timestamp} #{ids}"


def _show(records: list[Comparable], first: int, window_bytes: int) -> str:
    start = max(0, first - 2)
    shown = [_describe(r, window_bytes) for r in records[start : first + 4]]
    return (
        ("... " if start else "") + ", ".join(shown) + (" ..." if first + 4 < len(records) else "")
    )
