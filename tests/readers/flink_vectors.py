"""Test vectors for the Flink companion's header parsing and trust checks, decided by the Python
protocol (:mod:`progress_control.protocol`, :mod:`progress_control.trust`): the Java side
(``readers/flink``, ``ControlVectorsTest``) must reach the same verdict and the same marker on
every case, so it accepts exactly what our Python readers accept.

``python -m tests.readers.flink_vectors`` rewrites the committed file; ``test_flink.py`` fails
when it is stale.
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
    / "readers/flink/src/test/resources/progress-control-vectors.json"
)
CLOCK_MS = 1_750_000_000_000
SKEW_MS = 60_000
KEY = SigningKey("k1", b"0123456789abcdef-secret")
OTHER_SECRET = SigningKey("k1", b"another-secret-of-16+")
UNKNOWN = SigningKey("k9", b"0123456789abcdef-secret")
TOPIC, PARTITION, TS = "clicks", 3, CLOCK_MS - 5_000

Headers = list[tuple[str, bytes | None]]
Case = tuple[str, dict[str, object], int, Headers]  # name, policy, timestamp, headers

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


def _accepted_cases() -> list[Case]:
    v3 = ControlMarker("sidecar-a", 9, version=3, key_id="k1", mac=bytes(32))
    v3_signed = sign(v3, TOPIC, PARTITION, TS, KEY)
    v3_trailing = (
        ControlMarker("sidecar-a", 9, 3, key_id="k1", mac=v3_signed.mac).encode() + b"future"
    )
    unicode_marker = ControlMarker("sídecar-β", 2**64 - 1)
    return [
        ("v1", {}, TS, _one(_V1.encode())),
        ("v1 with other headers", {}, TS, [("trace", b"x"), *_one(_V1.encode()), ("b", None)]),
        ("v2 without keys", {}, TS, _one(_signed())),
        ("v2 verified", _KEYED, TS, _one(_signed())),
        ("v3 with trailing bytes, verified", _KEYED, TS, _one(v3_trailing)),
        ("unicode source, max sequence", {}, TS, _one(unicode_marker.encode())),
        (
            "exactly max skew ahead",
            {"max_skew_ms": SKEW_MS},
            CLOCK_MS + SKEW_MS,
            _one(_V1.encode()),
        ),
        ("timestamp zero", {}, 0, _one(_V1.encode())),
        ("allowed source", {"allowed_sources": ["sidecar-a", "b"]}, TS, _one(_V1.encode())),
        (
            "v2 verified by second key",
            {"keys": {"k0": b"zero-secret-0123456", KEY.key_id: KEY.secret}},
            TS,
            _one(_signed()),
        ),
    ]


def _rejected_cases() -> list[Case]:
    prefix = struct.pack(">BQB", 1, 1, 3)
    v2_prefix = struct.pack(">BQB", 2, 1, 1) + b"a"
    return [
        ("v1 when keys are set", _KEYED, TS, _one(_V1.encode())),
        ("other secret", _KEYED, TS, _one(_signed(key=OTHER_SECRET))),
        ("unknown key id", _KEYED, TS, _one(_signed(key=UNKNOWN))),
        ("signed for another partition", _KEYED, TS, _one(_signed(partition=4))),
        ("signed for another timestamp", _KEYED, TS, _one(_signed(ts=TS + 1))),
        ("signed for another topic", _KEYED, TS, _one(_signed(topic="clicks2"))),
        ("negative timestamp", {}, -1, _one(_V1.encode())),
        ("negative timestamp beats bad signature", _KEYED, -5, _one(_signed())),
        ("too far ahead", {"max_skew_ms": SKEW_MS}, CLOCK_MS + SKEW_MS + 1, _one(_V1.encode())),
        (
            "too far ahead beats source not allowed",
            {"allowed_sources": ["b"]},
            CLOCK_MS + 300_001,
            _one(_V1.encode()),
        ),
        ("source not allowed", {"allowed_sources": ["b"]}, TS, _one(_V1.encode())),
        ("no value", {}, TS, _one(None)),
        ("empty value", {}, TS, _one(b"")),
        ("too short", {}, TS, _one(prefix[:10])),
        ("version 0", {}, TS, _one(struct.pack(">BQB", 0, 1, 1) + b"a")),
        ("empty source id", {}, TS, _one(struct.pack(">BQB", 1, 1, 0) + b"x")),
        ("source id cut short", {}, TS, _one(prefix + b"ab")),
        ("v1 with trailing bytes", {}, TS, _one(prefix + b"abcd")),
        ("source id not UTF-8", {}, TS, _one(prefix + b"a\xffb")),
        ("source id an encoded surrogate", {}, TS, _one(prefix + b"\xed\xa0\x80")),
        ("v2 without signature", {}, TS, _one(v2_prefix)),
        ("v2 empty key id", {}, TS, _one(v2_prefix + b"\x00" + bytes(32))),
        ("v2 mac cut short", {}, TS, _one(v2_prefix + b"\x02k1" + bytes(31))),
        ("v2 with trailing bytes", {}, TS, _one(_signed() + b"x")),
        ("key id not UTF-8", {}, TS, _one(v2_prefix + b"\x02k\xff" + bytes(32))),
        ("two headers", {}, TS, _one(_V1.encode()) + _one(_V1.encode())),
    ]


def _policy(spec: dict[str, object]) -> TrustPolicy:
    keys = spec.get("keys", {})
    sources = spec.get("allowed_sources")
    assert isinstance(keys, dict)
    return TrustPolicy(
        max_skew_ms=int(str(spec.get("max_skew_ms", 300_000))),
        verification_keys=keys,
        allowed_sources=None if sources is None else frozenset(str(s) for s in sources),  # type: ignore[attr-defined]
    )


def _marker(headers: Headers) -> dict[str, object] | None:
    try:
        marker = parse_control_headers(headers)
    except Malformed:
        return None
    assert marker is not None
    return {
        "version": marker.version,
        "sequence": str(marker.sequence),
        "source_id": marker.source_id,
        "key_id": marker.key_id,
        "mac": None if marker.mac is None else marker.mac.hex(),
    }


def _vector(name: str, spec: dict[str, object], ts: int, headers: Headers) -> dict[str, object]:
    policy = _policy(spec)
    verdict = ControlRecordValidator(policy, clock_ms=lambda: CLOCK_MS).check(
        TOPIC, PARTITION, ts, headers
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
        "topic": TOPIC,
        "partition": PARTITION,
        "timestamp_ms": ts,
        "headers": [[n, None if v is None else v.hex()] for n, v in headers],
        "verdict": verdict.value,
        "marker": _marker(headers),
    }


def render() -> str:
    """The vectors file's text, as the Python protocol decides each case today."""
    cases = [_vector(*case) for case in _accepted_cases() + _rejected_cases()]
    return json.dumps({"cases": cases}, indent=1, ensure_ascii=False) + "\n"


if __name__ == "__main__":
    VECTORS_PATH.write_text(render(), encoding="utf-8")
    print(f"wrote {VECTORS_PATH}")
