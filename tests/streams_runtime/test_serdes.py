"""The built-in serdes' wire formats, as Kafka's own serdes write them."""

from __future__ import annotations

import math
import struct

import pytest

from streams_runtime.serdes import Float


@pytest.mark.parametrize(
    "bits",
    ["7ff8000000000000", "fff8000000000000", "7ff0000000000001", "fff800000000dead"],
)
def test_every_nan_is_written_as_doubleserializer_writes_it(bits: str) -> None:
    nan = struct.unpack(">d", bytes.fromhex(bits))[0]
    assert math.isnan(nan)
    assert Float().serialize(nan) == bytes.fromhex("7ff8000000000000")


@pytest.mark.parametrize("value", [0.0, -0.0, 1.5, -math.inf, math.inf, 5e-324, 1])
def test_other_doubles_keep_their_bits(value: float) -> None:
    written = Float().serialize(value)
    assert written == struct.pack(">d", value)
    assert Float().deserialize(written) == value
