"""Number and cell formatting shared by the HTML and markdown renderers."""

from __future__ import annotations

import math
from typing import Any


def fmt_num(v: Any, digits: int = 4) -> str:
    """A table cell: integers as they are, floats with ``digits`` decimals (scientific when tiny or huge)."""
    if v is None:
        return "–"
    if isinstance(v, bool) or not isinstance(v, int | float):
        return str(v)
    if isinstance(v, int):
        return str(v)
    if not math.isfinite(v):
        return "nan" if math.isnan(v) else ("inf" if v > 0 else "-inf")
    if v != 0 and (abs(v) >= 1e4 or abs(v) < 10**-digits):
        return f"{v:.{digits - 1}e}"
    return f"{v:.{digits}f}"


def fmt_interval(ci: Any, digits: int = 4) -> str:
    """``[low, high]`` from a ``{"low", "high"}`` dict or a pair; empty when absent."""
    if isinstance(ci, dict):
        lo, hi = ci.get("low"), ci.get("high")
    elif isinstance(ci, list | tuple) and len(ci) == 2:
        lo, hi = ci
    else:
        return ""
    return f"[{fmt_num(lo, digits)}, {fmt_num(hi, digits)}]"


def fmt_sig(v: Any, sig: int = 3, signed: bool = False) -> str:
    """The one number format of cards and reports: ``sig`` significant digits, plain decimals between
    1e-4 and 1e5 (``0.000312``, ``0.431``, ``1.02``), scientific outside; ``signed`` adds ``+``."""
    if v is None or isinstance(v, bool) or not isinstance(v, int | float):
        return "–" if v is None else str(v)
    if isinstance(v, int):  # counts stay exact
        return f"{v:+d}" if signed else str(v)
    x = float(v)
    if not math.isfinite(x):
        return "nan" if math.isnan(x) else ("inf" if x > 0 else "-inf")
    plus = "+" if signed else ""
    if x == 0:
        return f"{plus}0" if signed else "0"
    if 1e-4 <= abs(x) < 1e5:
        decimals = max(sig - 1 - math.floor(math.log10(abs(x))), 0)
        rounded = round(x, decimals)  # 0.999999 rounds up a decade: one decimal fewer
        if rounded and math.floor(math.log10(abs(rounded))) > math.floor(math.log10(abs(x))):
            decimals = max(decimals - 1, 0)
        return f"{x:{plus}.{decimals}f}"
    return f"{x:{plus}.{sig - 1}e}"


def fmt_rows(total: Any, weight: str | None = None) -> str:
    """How many rows a number stands for, for a person: ``1,234 rows`` when it counts rows; a weight sum
    when a weight column gave it, with that column as the unit (``weight sum 1.00e-300 (column 'w')``):
    never ``0 rows`` for tiny weights nor a 300-digit count for huge ones."""
    if total is None or isinstance(total, bool) or not isinstance(total, int | float):
        return "– rows"
    x = float(total)
    if weight is None and math.isfinite(x) and x.is_integer() and 0 <= x < 1e15:
        return f"{int(x):,} rows"
    unit = f" (column {weight!r})" if weight else " (sum of the row weights)"
    return f"weight sum {fmt_sig(x)}{unit}"


def fmt_ratio(value: Any, denominator: Any, reason: str, digits: int = 4) -> str:
    """A ratio, or ``n/a (reason)`` where its denominator is zero or missing (never a bare ``nan``)."""
    if (
        denominator is None
        or not isinstance(denominator, int | float)
        or not math.isfinite(float(denominator))
        or float(denominator) <= 0
    ):
        return f"n/a ({reason})"
    if value is None or not isinstance(value, int | float) or not math.isfinite(float(value)):
        return f"n/a ({reason})"
    return f"{float(value):.{digits}f}"
