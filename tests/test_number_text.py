"""Doubles to text and back in bulk (book/number_text.py): every double's text reads back
as that double with the digits `repr` gives, and a row of texts reads as `float` reads
each one, or is handed back to `float` where JSON spells a number differently."""

import math
import struct

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from workbook_builder.book.number_text import parsed_numbers, shortest_texts


def digits(text: str) -> str:
    """The significant digits of a number's text, whatever its notation."""
    mantissa = text.lstrip("-").lower().partition("e")[0].replace(".", "")
    return mantissa.strip("0")


@given(st.lists(st.floats(allow_nan=False, allow_infinity=False), min_size=1, max_size=40))
def test_every_double_is_written_in_its_shortest_round_trip_digits(values):
    row = np.array(values, np.float64)
    texts = shortest_texts(row)
    assert [float(t) for t in texts] == values
    assert [math.copysign(1, float(t)) for t in texts] == [math.copysign(1, v) for v in values]
    assert [digits(t) for t in texts] == [digits(repr(v)) for v in values]


def test_random_bit_patterns_and_the_edges_round_trip():
    rng = np.random.default_rng(0)
    row = rng.integers(0, 2**63, 20_000, dtype=np.uint64).view(np.float64)
    row = np.concatenate([row[np.isfinite(row)],
                          [0.0, -0.0, 5e-324, -5e-324, 2.2250738585072014e-308,
                           1.7976931348623157e308, 1e16, 1e-7, 0.1, 1 / 3]])
    texts = shortest_texts(row)
    assert np.array([float(t) for t in texts]).tobytes() == row.tobytes()
    assert parsed_numbers([t.encode() for t in texts]).tobytes() == row.tobytes()
    strided = np.arange(12.0).reshape(3, 4).T[0]  # a column: not contiguous
    assert shortest_texts(strided) == ["0.0", "4.0", "8.0"]


def test_a_row_with_a_nan_or_an_infinity_is_left_to_the_caller():
    assert shortest_texts(np.array([1.0, np.nan])) is None
    assert shortest_texts(np.array([np.inf, 1.0])) is None


@given(st.lists(st.floats(allow_nan=False, allow_infinity=False), min_size=1, max_size=30))
def test_texts_other_applications_write_read_as_float_reads_them(values):
    # Excel's 17 significant digits, an upper-case exponent, whole numbers
    texts = [f"{v:.17G}".encode() for v in values] + [str(int(v)).encode()
                                                       for v in values if abs(v) < 2**62]
    got = parsed_numbers(texts)
    assert got.tobytes() == np.array([float(t) for t in texts]).tobytes()


@pytest.mark.parametrize("text", [b".5", b"+1", b"1.", b"1e400", b"inf", b"nan", b"true",
                                  b" 1", b"1,2", b"[1]", b'"1"', b"", b"0x10"])
def test_a_text_json_does_not_spell_as_float_does_is_handed_back(text):
    assert parsed_numbers([b"1.5", text]) is None


def test_negative_zero_keeps_its_sign():
    got = parsed_numbers([b"-0", b"-0.0", b"0", b"-0e5"])
    assert [struct.pack("d", x) for x in got] == [struct.pack("d", x)
                                                  for x in (-0.0, -0.0, 0.0, -0.0)]
