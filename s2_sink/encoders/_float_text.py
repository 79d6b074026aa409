"""Arrow float columns → Java's ``Double.toString`` / ``Float.toString`` text, whole columns at a time.

Arrow's cast to string prints the same shortest round-trip digits as Python's ``repr`` (and so as
``_java_text``, the per-value reference this module is tested against), laid out differently: ``1e+15``,
``0.00001``, ``12``. Java writes plain notation with at least one fractional digit when the decimal exponent
is in [-3, 6] (1e-3 <= |x| < 1e7) and ``d.dddE<n>`` elsewhere. Most real values are plain, where Arrow's
text only lacks Java's ``.0`` on integral values; the others are re-laid out from their digits and exponent
with string kernels, one group per layout, so no value passes through Python.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc

__all__ = ["java_float_text"]

# Arrow's shortest text of a finite value: sign, integer digits, fraction, exponent ("-1.5e-10", "1e+15")
_ARROW_FLOAT = r"^-?(?P<i>[0-9]*)(?:\.(?P<f>[0-9]*))?(?:e\+?(?P<e>-?[0-9]+))?$"
_PLAIN_EXPONENTS = np.arange(-3, 7)
# group keys besides the plain exponents -3..6: the d.dddE<n> layout, then constant texts
_SCI = 10
_CONSTANT = {11: '"NaN"', 12: '"Infinity"', 13: '"-Infinity"'}


def java_float_text(arr: pa.Array) -> list[pa.Array]:
    """The JSON text Spark's ``to_json`` writes for every value of a float32/float64 array, as arrays whose
    element-wise concatenation is each row's text (so the caller can join them with the rest of the row).

    NaN and the infinities are quoted (``"NaN"``, ``"-Infinity"``), as Jackson writes them; null rows hold
    an arbitrary text (the caller writes ``null`` there).
    """
    values = arr.to_numpy(zero_copy_only=False)  # nulls read as NaN: re-laid out below, then overwritten
    text = pc.cast(arr, pa.string())
    with np.errstate(invalid="ignore"):
        magnitude = np.abs(values)
        # Arrow prints these as Java does, but for the ".0" Java adds to integral values ("0", "-0" too)
        plain = ((magnitude >= values.dtype.type(1e-3)) & (magnitude < 1e7)) | (magnitude == 0)
        integral = plain & (values == np.trunc(values))
    if not plain.all():
        other = ~plain
        # few rows in real data: re-laid out on their own, then put back in place
        text = pc.replace_with_mask(
            text, pa.array(other), _relayout(text.filter(pa.array(other)), values[other])
        )
    if not integral.any():
        return [text]
    return [text, pc.if_else(pa.array(integral), ".0", "")]


def _relayout(text: pa.Array, values: npt.NDArray[np.floating]) -> pa.Array:
    """Java's text for non-zero values outside the plain range, and for the non-finite ones."""
    group = np.full(len(values), _SCI, np.int64)
    for key, rows in zip(_CONSTANT, (np.isnan(values), values == np.inf, values == -np.inf), strict=True):
        group[rows] = key
    regular = np.isfinite(values)
    digits = pa.array([], pa.string())
    scientific = np.zeros(0, np.int64)
    if regular.any():
        digits, scientific = _digits(text.filter(pa.array(regular)))
        group[regular] = np.where(np.isin(scientific, _PLAIN_EXPONENTS), scientific, _SCI)
    digit_row = np.cumsum(regular) - 1  # a regular row's index into digits
    order = np.argsort(group, kind="stable")
    sorted_group = group[order]
    pieces: list[pa.Array] = []
    for key in np.unique(sorted_group).tolist():
        lo, hi = np.searchsorted(sorted_group, [key, key + 1])
        if key in _CONSTANT:
            pieces.append(pa.repeat(pa.scalar(_CONSTANT[key]), hi - lo))
            continue
        rows = digit_row[order[lo:hi]]
        pieces.append(_layout(digits.take(pa.array(rows)), key, scientific[rows]))
    unsigned = pa.concat_arrays(pieces).take(pa.array(np.argsort(order)))
    negative = regular & np.signbit(values)
    if not negative.any():
        return unsigned
    return pc.binary_join_element_wise(pc.if_else(pa.array(negative), "-", ""), unsigned, "")


def _digits(text: pa.Array) -> tuple[pa.Array, npt.NDArray[np.int64]]:
    """(significant digits, decimal exponent of the first one) of finite non-zero values' Arrow text."""
    parts = pc.extract_regex(text, _ARROW_FLOAT)
    whole, fraction, exp = (parts.field(k) for k in ("i", "f", "e"))
    all_digits = pc.binary_join_element_wise(whole, fraction, "")
    unpadded = pc.utf8_ltrim(all_digits, "0")
    leading_zeros = _lengths(all_digits) - _lengths(unpadded)
    exponent = pc.cast(pc.if_else(pc.equal(exp, ""), "0", exp), pa.int64()).to_numpy()
    return pc.utf8_rtrim(unpadded, "0"), exponent + _lengths(whole) - 1 - leading_zeros


def _layout(digits: pa.Array, group: int, scientific: npt.NDArray[np.int64]) -> pa.Array:
    """Java's unsigned text of d.ddd x 10^scientific, for the rows of one layout group."""
    if group == _SCI:
        first = pc.utf8_slice_codeunits(digits, 0, 1)
        rest = _or_zero(pc.utf8_slice_codeunits(digits, 1))
        return pc.binary_join_element_wise(first, ".", rest, "E", pa.array(scientific).cast(pa.string()), "")
    if group < 0:  # 0.00ddd
        return pc.binary_join_element_wise("0." + "0" * (-group - 1), digits, "")
    width = group + 1  # integer digits, padded with zeros when the digits run out first
    whole = pc.utf8_rpad(pc.utf8_slice_codeunits(digits, 0, width), width=width, padding="0")
    return pc.binary_join_element_wise(whole, ".", _or_zero(pc.utf8_slice_codeunits(digits, width)), "")


def _or_zero(fraction: pa.Array) -> pa.Array:
    """Java writes at least one fractional digit."""
    return pc.if_else(pc.equal(fraction, ""), "0", fraction)


def _lengths(text: pa.Array) -> npt.NDArray[np.int64]:
    lengths: npt.NDArray[np.int64] = pc.binary_length(text).to_numpy().astype(np.int64)
    return lengths
