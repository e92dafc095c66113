"""Test vectors for the Java readers' header parsing and trust checks, decided by the Python
protocol (:mod:`progress_control.protocol`, :mod:`progress_control.trust`): the Java core
(``readers/core``, ``ControlVectorsTest``), which the Kafka Streams and Flink companions both use,
must reach the same verdict and the same marker on every case, so it accepts exactly what our
Python readers accept.

``python -m tests.readers.control_vectors`` rewrites the committed file;
``test_control_vectors.py`` fails when it is stale.
"""

from __future__ import annotations

import json
import struct
from pathlib import Path

from progress_control.protocol import CONTROL_HEADER, ControlMarker, parse_control_headers
from progress_control.protocol import MalformedControlHeaderError as Malformed
from progress_control.trust import ControlRecordValidator, SigningKey, TrustPolicy, sign

__all__ = ["VECTORS_PATH", "render"]

VECTORS_PATH = (
    Path(__file__).resolve().parents[2]
    / "readers/core/src/test/resources/progress-control-vectors.json"
)
CLOCK_MS = 1_750_000_000_000
SKEW_MS = 60_000
KEY = SigningKey("k1", b"0123456789abcdef-secret")
OTHER_SECRET = SigningKey("k1", b"another-secret-of-16+")
UNKNOWN = SigningKey("k9", b"0123456789abcdef-secret")
TOPIC, PARTITION, TS = "clicks", 3, CLOCK_MS - 5_000

Headers = list[tuple[str, bytes | None]]
# name, policy, timestamp, headers, and the topic and partition the record was read from
Case = tuple[str, dict[str, object], int, Headers, str, int]

_KEYED: dict[str, object] = {"keys": {KEY.key_id: KEY.secret}}
_V1 = ControlMarker("sidecar-a", 7)


def _signed(
    marker: ControlMarker = _V1,
    *,
    topic: str = TOPIC,
    partition: int = PARTITION,
    ts: int = TS,
    key: SigningKey = KEY,
) -> bytes:
    return sign(marker, topic, partition, ts, key).encode()


def _one(value: bytes | None) -> Headers:
    return [(CONTROL_HEADER, value)]


def _case(
    name: str,
    headers: Headers,
    policy: dict[str, object] | None = None,
    ts: int = TS,
    *,
    topic: str = TOPIC,
    partition: int = PARTITION,
) -> Case:
    return (name, policy or {}, ts, headers, topic, partition)


def _accepted_cases() -> list[Case]:
    v3 = ControlMarker("sidecar-a", 9, version=3, key_id="k1", mac=bytes(32))
    v3_signed = sign(v3, TOPIC, PARTITION, TS, KEY)
    v3_trailing = (
        ControlMarker("sidecar-a", 9, 3, key_id="k1", mac=v3_signed.mac).encode() + b"future"
    )
    unicode_marker = ControlMarker("sídecar-β", 2**64 - 1)
    return [
        _case("v1", _one(_V1.encode())),
        _case("v1 with other headers", [("trace", b"x"), *_one(_V1.encode()), ("b", None)]),
        _case("v2 without keys", _one(_signed())),
        _case("v2 verified", _one(_signed()), _KEYED),
        _case("v3 with trailing bytes, verified", _one(v3_trailing), _KEYED),
        _case("unicode source, max sequence", _one(unicode_marker.encode())),
        _case(
            "v2 verified, unicode source and topic, max sequence",
            _one(_signed(unicode_marker, topic="klicks-ü", partition=0)),
            _KEYED,
            topic="klicks-ü",
            partition=0,
        ),
        _case(
            "exactly max skew ahead",
            _one(_V1.encode()),
            {"max_skew_ms": SKEW_MS},
            CLOCK_MS + SKEW_MS,
        ),
        _case("timestamp zero", _one(_V1.encode()), ts=0),
        _case("allowed source", _one(_V1.encode()), {"allowed_sources": ["sidecar-a", "b"]}),
        _case(
            "v2 verified by second key",
            _one(_signed()),
            {"keys": {"k0": b"zero-secret-0123456", KEY.key_id: KEY.secret}},
        ),
    ]


def _rejected_cases() -> list[Case]:
    prefix = struct.pack(">BQB", 1, 1, 3)
    v2_prefix = struct.pack(">BQB", 2, 1, 1) + b"a"
    v1 = _one(_V1.encode())
    return [
        _case("v1 when keys are set", v1, _KEYED),
        _case("other secret", _one(_signed(key=OTHER_SECRET)), _KEYED),
        _case("unknown key id", _one(_signed(key=UNKNOWN)), _KEYED),
        _case("signed for another partition", _one(_signed(partition=4)), _KEYED),
        _case("signed for another timestamp", _one(_signed(ts=TS + 1)), _KEYED),
        _case("signed for another topic", _one(_signed(topic="clicks2")), _KEYED),
        _case("negative timestamp", v1, ts=-1),
        _case("negative timestamp beats bad signature", _one(_signed()), _KEYED, -5),
        _case("too far ahead", v1, {"max_skew_ms": SKEW_MS}, CLOCK_MS + SKEW_MS + 1),
        _case(
            "too far ahead beats source not allowed",
            v1,
            {"allowed_sources": ["b"]},
            CLOCK_MS + 300_001,
        ),
        _case("source not allowed", v1, {"allowed_sources": ["b"]}),
        _case("no header", [("trace", b"x")]),
        _case("header name in other case", [("Progress-Control", _V1.encode())]),
        _case("two headers", v1 + v1),
        _case("no value", _one(None)),
        _case("empty value", _one(b"")),
        _case("too short", _one(prefix[:10])),
        _case("version 0", _one(struct.pack(">BQB", 0, 1, 1) + b"a")),
        _case("empty source id", _one(struct.pack(">BQB", 1, 1, 0) + b"x")),
        _case("source id cut short", _one(prefix + b"ab")),
        _case("v1 with trailing bytes", _one(prefix + b"abcd")),
        _case("source id not UTF-8", _one(prefix + b"a\xffb")),
        _case("source id an encoded surrogate", _one(prefix + b"\xed\xa0\x80")),
        _case("v2 without signature", _one(v2_prefix)),
        _case("v2 empty key id", _one(v2_prefix + b"\x00" + bytes(32))),
        _case("v2 mac cut short", _one(v2_prefix + b"\x02k1" + bytes(31))),
        _case("v2 with trailing bytes", _one(_signed() + b"x")),
        _case("key id not UTF-8", _one(v2_prefix + b"\x02k\xff" + bytes(32))),
    ]


def _policy(spec: dict[str, object]) -> TrustPolicy:
    keys = spec.get("keys", {})
    sources = spec.get("allowed_sources")
    assert isinstance(keys, dict)
    assert sources is None or isinstance(sources, list)
    return TrustPolicy(
        max_skew_ms=int(str(spec.get("max_skew_ms", 300_000))),
        verification_keys=keys,
        allowed_sources=None if sources is None else frozenset(str(s) for s in sources),
    )


def _marker(headers: Headers) -> dict[str, object] | None:
    """The marker as the Python parser reads it; ``None`` when there is none or it is invalid."""
    try:
        marker = parse_control_headers(headers)
    except Malformed:
        return None
    if marker is None:
        return None
    return {
        "version": marker.version,
        "sequence": str(marker.sequence),
        "source_id": marker.source_id,
        "key_id": marker.key_id,
        "mac": None if marker.mac is None else marker.mac.hex(),
    }


def _vector(case: Case) -> dict[str, object]:
    name, spec, ts, headers, topic, partition = case
    policy = _policy(spec)
    verdict = ControlRecordValidator(policy, clock_ms=lambda: CLOCK_MS).check(
        topic, partition, ts, headers
    )
    return {
        "name": name,
        "policy": {
            "max_skew_ms": policy.max_skew_ms,
            "keys": {k: v.hex() for k, v in policy.verification_keys.items()},
            "allowed_sources": (
                None if policy.allowed_sources is None else sorted(policy.allowed_sources)
            ),
        },
        "clock_ms": CLOCK_MS,
        "topic": topic,
        "partition": partition,
        "timestamp_ms": ts,
        "headers": [[n, None if v is None else v.hex()] for n, v in headers],
        "verdict": verdict.value,
        "marker": _marker(headers),
    }


def render() -> str:
    """The vectors file's text, as the Python protocol decides each case today."""
    cases = [_vector(case) for case in _accepted_cases() + _rejected_cases()]
    return json.dumps({"cases": cases}, indent=1, ensure_ascii=False) + "\n"


if __name__ == "__main__":
    VECTORS_PATH.write_text(render(), encoding="utf-8")
    print(f"wrote {VECTORS_PATH}")
