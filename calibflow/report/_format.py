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
