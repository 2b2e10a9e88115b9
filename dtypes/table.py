"""Human-readable descriptions of data types: the range summary and value tables
printed by `vmc dtypes` and copied into docs/dtypes.md."""

from __future__ import annotations

import numpy as np

from tilevm.dtypes.codec import decode
from tilevm.dtypes.datatype import DataType, DTypeError, all_dtypes


def format_value(value: float) -> str:
    """Shortest text that reads back as exactly this float64 value."""
    return repr(float(value))


def _range_text(dtype: DataType, value) -> str:
    # Integer ranges print as integers (int64's bounds are not float64 values).
    return str(int(value)) if dtype.is_integer else format_value(value)


def summary_table(types: tuple[DataType, ...] | None = None) -> str:
    """One line per type: bits, kind, range, smallest positive value, specials."""
    types = all_dtypes() if types is None else types
    header = ("name", "bits", "kind", "min", "max", "smallest>0", "inf", "nan")
    rows = [header]
    for t in types:
        rows.append((
            t.name, str(t.bits), t.kind.value, _range_text(t, t.min_exact),
            _range_text(t, t.max_exact), _range_text(t, t.smallest_subnormal_exact),
            "yes" if t.has_inf else "no", "yes" if t.has_nan else "no",
        ))
    widths = [max(len(r[i]) for r in rows) for i in range(len(header))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in rows)


def value_table(dtype: DataType) -> str:
    """Every code of a 1..8-bit type: code, its bits (sign first), its exact value."""
    if not dtype.is_lowbit:
        raise DTypeError(f"{dtype} has {dtype.num_codes} codes; value tables are printed for "
                         f"types of 1..8 bits")
    codes = np.arange(dtype.num_codes)
    values = decode(codes, dtype)
    lines = [f"code  {'bits'.ljust(dtype.bits)}  value"]
    for code, value in zip(codes, values):
        lines.append(f"{code:4d}  {code:0{dtype.bits}b}  {format_value(value)}".rstrip())
    return "\n".join(lines)
