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
   and the one record each of them gives in every output of the case is not expected.

Everything else must be equal, per key in offset order: partition (except for null keys, which
both engines spread as they like), key, value and timestamp.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

from tests.conformance.inputs import SENTINEL_KEY
from tests.conformance.topologies import Case

__all__ = ["OutputRecord", "differences"]

_WINDOW_BYTES = 16  # a session-windowed key ends with the window's end and start


@dataclass(frozen=True)
class OutputRecord:
    partition: int
    key: bytes | None
    value: bytes | None
    timestamp: int
    control: bool = False

    def comparable(self) -> tuple[int, bytes | None, bytes | None, int]:
        return (-1 if self.key is None else self.partition, self.key, self.value, self.timestamp)


def _user_key(record: OutputRecord, windowed: bool) -> bytes | None:
    if record.key is None or not windowed:
        return record.key
    return record.key[:-_WINDOW_BYTES]


def _by_key(
    records: list[OutputRecord], windowed: bool = False
) -> dict[bytes | None, list[OutputRecord]]:
    """Records per user key (all sessions of a key together), in offset order."""
    grouped: dict[bytes | None, list[OutputRecord]] = defaultdict(list)
    for record in records:
        grouped[_user_key(record, windowed)].append(record)
    return grouped


def _idempotent_updates(table: list[OutputRecord]) -> dict[bytes | None, set[int]]:
    """Per key, the positions of the table updates emit-on-change drops: same value as the
    update before (a value, not a delete), strictly newer timestamp."""
    skipped: dict[bytes | None, set[int]] = {}
    for key, updates in _by_key(table).items():
        skipped[key] = {
            i
            for i in range(1, len(updates))
            if updates[i - 1].value is not None
            and updates[i].value == updates[i - 1].value
            and updates[i].timestamp > updates[i - 1].timestamp
        }
    return skipped


def expected_from_kafka_streams(
    case: Case, kafka_streams: dict[str, list[OutputRecord]]
) -> dict[str, dict[bytes | None, list[OutputRecord]]]:
    """What the runtime must write to each output, per key, given Kafka Streams' outputs."""
    data = {
        role: [r for r in records if _user_key(r, case.windowed) != SENTINEL_KEY]
        for role, records in kafka_streams.items()
    }
    skipped = _idempotent_updates(data[case.table_output]) if case.table_output else {}
    return {
        role: {
            key: [r for i, r in enumerate(updates) if i not in skipped.get(key, ())]
            for key, updates in _by_key(records, case.windowed).items()
        }
        for role, records in data.items()
    }


def differences(
    case: Case,
    kafka_streams: dict[str, list[OutputRecord]],
    runtime: dict[str, list[OutputRecord]],
    *,
    limit: int = 3,
) -> list[str]:
    """Every way the runtime's outputs differ from what Kafka Streams' outputs allow, readable;
    empty when they conform."""
    found: list[str] = []
    expected = expected_from_kafka_streams(case, kafka_streams)
    for role in case.outputs:
        data = [r for r in runtime[role] if not r.control]
        leaked = [r for r in data if _user_key(r, case.windowed) == SENTINEL_KEY]
        if leaked:
            found.append(f"{case.name}/{role}: {len(leaked)} data records under the sentinel key")
        actual = _by_key(data, case.windowed)
        for key in sorted(set(expected[role]) | set(actual), key=lambda k: k or b""):
            want = [r.comparable() for r in expected[role].get(key, [])]
            got = [r.comparable() for r in actual.get(key, [])]
            if want != got:
                first = next(
                    (i for i, (w, g) in enumerate(zip(want, got, strict=False)) if w != g),
                    min(len(want), len(got)),
                )
                found.append(
                    f"{case.name}/{role} key {key!r}: first difference at #{first}\n"
                    f"  Kafka Streams ({len(want)}): {_show(want, first)}\n"
                    f"  runtime       ({len(got)}): {_show(got, first)}"
                )
                if len(found) >= limit:
                    return found
    return found


def _show(records: list[tuple[int, bytes | None, bytes | None, int]], first: int) -> str:
    start = max(0, first - 2)
    shown = [f"p{p} {k!r}={v!r}@{t}" for p, k, v, t in records[start : first + 4]]
    return ("... " if start else "") + ", ".join(shown) + (" ..." if first + 4 < len(records) else "")
