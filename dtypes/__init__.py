"""Arbitrary-bit-width data types: `DataType`, exact codecs, and bit packing.

    >>> from tilevm import dtypes
    >>> t = dtypes.parse("f4e2m1")
    >>> dtypes.decode(dtypes.encode([0.7, 5.0, -100.0], t), t).tolist()
    [0.5, 4.0, -6.0]

The special-value and rounding policy is in docs/dtypes.md.
"""

from tilevm.dtypes.codec import decode, encode, host_dtype
from tilevm.dtypes.datatype import (
    DataType,
    DTypeError,
    Kind,
    Specials,
    all_dtypes,
    lowbit_dtypes,
    parse,
)
from tilevm.dtypes.packing import pack, packed_size, unpack
from tilevm.dtypes.table import summary_table, value_table

__all__ = [
    "DataType", "DTypeError", "Kind", "Specials", "all_dtypes", "lowbit_dtypes", "parse",
    "decode", "encode", "host_dtype", "pack", "packed_size", "unpack", "summary_table",
    "value_table",
]


def __getattr__(name: str) -> DataType:
    # Every canonical type name is an attribute: `dtypes.f6e3m2`, `dtypes.int4`, `dtypes.f16`.
    try:
        found = parse(name)
    except DTypeError:
        found = None
    if found is None or found.name != name:
        raise AttributeError(f"module 'tilevm.dtypes' has no attribute {name!r}")
    return found
