"""Python renderings of the JVM's number and interval text, so both encoding paths emit the same bytes.

Spark's ``to_json`` writes doubles with ``Double.toString``, floats with ``Float.toString``, decimals with
``BigDecimal.toString`` and day-time intervals as ANSI interval literals. These functions reproduce those
layouts from Python's shortest round-trip digits. JDK versions before 19 occasionally print a double with more
digits than the shortest form; the value still parses back to the same double.
"""

from __future__ import annotations

import math
import struct
from decimal import Decimal

__all__ = ["java_decimal", "java_double", "java_float", "java_interval"]

_NON_FINITE = {math.inf: '"Infinity"', -math.inf: '"-Infinity"'}


def _layout(negative: bool, digits: str, exponent: int) -> str:
    """Java's ``Double.toString`` layout of 0.<digits> x 10^exponent (no leading zeros in digits)."""
    sign = "-" if negative else ""
    if -3 < exponent <= 7:  # 1e-3 <= |x| < 1e7: plain notation, at least one digit after the point
        if exponent <= 0:
            return f"{sign}0.{'0' * -exponent}{digits}"
        whole, frac = digits[:exponent].ljust(exponent, "0"), digits[exponent:]
        return f"{sign}{whole}.{frac or '0'}"
    return f"{sign}{digits[0]}.{digits[1:] or '0'}E{exponent - 1}"


def _shortest(text: str) -> tuple[bool, str, int]:
    """Split a Python float text into (negative, significant digits, exponent of 0.d1d2... form)."""
    sign, digits, exp = Decimal(text).as_tuple()
    ds = "".join(map(str, digits)).rstrip("0") or "0"
    return bool(sign), ds, len(digits) + int(exp)


def _special(x: float) -> str | None:
    """The JSON text of NaN, the infinities and signed zeros (the same for float and double), else None."""
    if math.isnan(x):
        return '"NaN"'
    if x in _NON_FINITE:
        return _NON_FINITE[x]
    if x == 0.0:
        return "-0.0" if math.copysign(1.0, x) < 0 else "0.0"
    return None


def java_double(x: float) -> str:
    """``Double.toString(x)`` as Jackson writes it into JSON (NaN and infinities quoted)."""
    special = _special(x)
    if special is not None:
        return special
    return _layout(*_shortest(repr(x)))


def java_float(x: float) -> str:
    """``Float.toString(x)`` for a float32 value widened to a Python float."""
    special = _special(x)
    if special is not None:
        return special
    packed = struct.pack("<f", x)
    for decimals in range(9):  # the shortest text that reads back as the same float32
        text = f"{x:.{decimals}e}"
        try:
            if struct.pack("<f", float(text)) == packed:
                return _layout(*_shortest(text))
        except OverflowError:  # rounding up past the float32 range
            continue
    return _layout(*_shortest(repr(x)))  # pragma: no cover - 9 significant digits always round-trip


def java_decimal(d: Decimal) -> str:
    """``BigDecimal.toString()``: plain unless the adjusted exponent is below -6 (``1E-7``, ``0E-8``).

    Python's ``Decimal.__str__`` follows the same rule; only Python's negative zero has no Java counterpart.
    """
    return str(d.copy_abs()) if d.is_zero() else str(d)


_UNITS_US = (86_400_000_000, 3_600_000_000, 60_000_000, 1_000_000)
_FIELD_NAMES = ("DAY", "HOUR", "MINUTE", "SECOND")


def java_interval(micros: int, start: int, end: int) -> str:
    """Spark's ANSI text for a value of ``interval <start> to <end>`` (fields 0=DAY .. 3=SECOND)."""
    sign = "-" if micros < 0 else ""
    rest = abs(micros)
    parts: list[str] = []
    for field in range(start, end + 1):
        if field == start:
            value, rest = divmod(rest, _UNITS_US[field])
            text = str(value) if field == 0 else f"{value:02d}"
        else:
            value, rest = divmod(rest, _UNITS_US[field])
            text = f"{value:02d}"
        if field == 3 and rest:
            text += "." + f"{rest:06d}".rstrip("0")
        parts.append(text)
    body = parts[0]
    for field, text in zip(range(start + 1, end + 1), parts[1:], strict=True):
        body += (" " if field == 1 else ":") + text
    names = _FIELD_NAMES[start] if start == end else f"{_FIELD_NAMES[start]} TO {_FIELD_NAMES[end]}"
    return f"INTERVAL '{sign}{body}' {names}"
