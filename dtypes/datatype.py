"""`DataType`: one value per scalar type the VM knows, and the parser of type names.

Every property of a format follows from its fields (bits, kind, exponent and
mantissa widths, special-value policy) through one set of formulas; nothing is
tabulated per type. The special-value policy (docs/dtypes.md):

- sub-byte floats, and every 8-bit float except f8e5m2, are *finite-only*: every
  code is a number, there is no inf and no NaN;
- f8e4m3 follows the OCP "E4M3FN" convention: no inf, and the all-ones exponent
  and mantissa code (0x7F/0xFF) is NaN; every other code is a number;
- f8e5m2, f16, bf16 and f32 are IEEE-like: the all-ones exponent holds inf
  (mantissa 0) and NaN (mantissa != 0).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import Enum
from fractions import Fraction


class Kind(Enum):
    SIGNED = "int"
    UNSIGNED = "uint"
    FLOAT = "float"


class Specials(Enum):
    """Which codes of a float format are not numbers."""

    FINITE = "finite"  # every code is a number
    FN = "fn"  # no inf; the all-ones exponent+mantissa code is NaN
    IEEE = "ieee"  # all-ones exponent: inf (mantissa 0) or NaN


class DTypeError(ValueError):
    """An unknown type name, or a value a format cannot hold."""


@dataclass(frozen=True)
class DataType:
    """A scalar type. Compare and hash by value; print as its canonical name."""

    name: str
    bits: int
    kind: Kind
    exponent_bits: int = 0
    mantissa_bits: int = 0
    specials: Specials = Specials.FINITE

    def __str__(self) -> str:
        return self.name

    def __repr__(self) -> str:
        return f"dtypes.{self.name}"

    # ---- classification -------------------------------------------------------------
    @property
    def is_float(self) -> bool:
        return self.kind is Kind.FLOAT

    @property
    def is_integer(self) -> bool:
        return self.kind is not Kind.FLOAT

    @property
    def is_signed(self) -> bool:
        return self.kind is not Kind.UNSIGNED

    @property
    def is_subbyte(self) -> bool:
        return self.bits < 8

    @property
    def is_lowbit(self) -> bool:
        """A type of 1..8 bits: stored bit-packed, converted by the generic rules."""
        return self.bits <= 8

    @property
    def num_codes(self) -> int:
        return 1 << self.bits

    @property
    def has_inf(self) -> bool:
        return self.specials is Specials.IEEE

    @property
    def has_nan(self) -> bool:
        return self.specials is not Specials.FINITE

    # ---- float fields ---------------------------------------------------------------
    @property
    def bias(self) -> int:
        """Exponent bias of a float format (0 for integers)."""
        return (1 << (self.exponent_bits - 1)) - 1 if self.is_float else 0

    @property
    def min_exponent(self) -> int:
        """Unbiased exponent of the smallest normal number (also the subnormals' scale)."""
        return 1 - self.bias

    @property
    def max_exponent(self) -> int:
        """Unbiased exponent of the largest finite number."""
        top = (1 << self.exponent_bits) - 1
        return top - self.bias - (1 if self.specials is Specials.IEEE else 0)

    # ---- ranges (exact) -------------------------------------------------------------
    @property
    def max_exact(self) -> Fraction:
        """Largest finite value, exactly."""
        if self.kind is Kind.SIGNED:
            return Fraction((1 << (self.bits - 1)) - 1)
        if self.kind is Kind.UNSIGNED:
            return Fraction((1 << self.bits) - 1)
        m = self.mantissa_bits
        mantissa_units = (1 << (m + 1)) - 1  # 1.11..1 in units of 2^-m
        if self.specials is Specials.FN:
            mantissa_units -= 1  # the all-ones mantissa at the top exponent is NaN
        return Fraction(mantissa_units) * Fraction(2) ** (self.max_exponent - m)

    @property
    def min_exact(self) -> Fraction:
        """Smallest (most negative) finite value, exactly."""
        if self.kind is Kind.SIGNED:
            return Fraction(-(1 << (self.bits - 1)))
        if self.kind is Kind.UNSIGNED:
            return Fraction(0)
        return -self.max_exact

    @property
    def smallest_subnormal_exact(self) -> Fraction:
        """Smallest positive value, exactly (1 for integers; the smallest normal when M=0)."""
        if self.is_integer:
            return Fraction(1)
        if self.mantissa_bits == 0:
            return Fraction(2) ** self.min_exponent
        return Fraction(2) ** (self.min_exponent - self.mantissa_bits)

    @property
    def max(self) -> float:
        return float(self.max_exact)

    @property
    def min(self) -> float:
        return float(self.min_exact)

    @property
    def smallest_subnormal(self) -> float:
        return float(self.smallest_subnormal_exact)

    @property
    def nan_code(self) -> int | None:
        """The positive NaN code that `encode` gives for NaN input, or None if none."""
        if self.specials is Specials.FINITE:
            return None
        if self.specials is Specials.FN:
            return (1 << (self.bits - 1)) - 1
        e, m = self.exponent_bits, self.mantissa_bits
        return (((1 << e) - 1) << m) | (1 << (m - 1))  # quiet NaN: top mantissa bit

    @property
    def code_dtype(self) -> str:
        """The numpy unsigned type that holds one code of this format."""
        for width in (8, 16, 32, 64):
            if self.bits <= width:
                return f"uint{width}"
        raise AssertionError(self.bits)


# ---- the registry ---------------------------------------------------------------------

def _float(bits: int, e: int, m: int, specials: Specials = Specials.FINITE,
           name: str | None = None) -> DataType:
    return DataType(name or f"f{bits}e{e}m{m}", bits, Kind.FLOAT, e, m, specials)


def _build_registry() -> dict[str, DataType]:
    types: list[DataType] = []
    for b in range(1, 9):
        types.append(DataType(f"int{b}", b, Kind.SIGNED))
        types.append(DataType(f"uint{b}", b, Kind.UNSIGNED))
    for b in range(2, 9):
        for e in range(1, b):
            m = b - 1 - e
            specials = Specials.FINITE
            if (b, e) == (8, 4):
                specials = Specials.FN
            elif (b, e) == (8, 5):
                specials = Specials.IEEE
            types.append(_float(b, e, m, specials))
    for b in (16, 32, 64):
        types.append(DataType(f"int{b}", b, Kind.SIGNED))
        types.append(DataType(f"uint{b}", b, Kind.UNSIGNED))
    types.append(_float(16, 5, 10, Specials.IEEE, "f16"))
    types.append(_float(16, 8, 7, Specials.IEEE, "bf16"))
    types.append(_float(32, 8, 23, Specials.IEEE, "f32"))
    return {t.name: t for t in types}


_REGISTRY: dict[str, DataType] = _build_registry()

# Other spellings users write; each maps to one canonical name.
_ALIASES: dict[str, str] = {
    "float16": "f16", "half": "f16", "fp16": "f16",
    "bfloat16": "bf16",
    "float32": "f32", "float": "f32", "fp32": "f32",
    "f8e4m3fn": "f8e4m3", "float8_e4m3fn": "f8e4m3", "fp8e4m3": "f8e4m3",
    "float8_e5m2": "f8e5m2", "fp8e5m2": "f8e5m2",
    "fp4": "f4e2m1", "f4": "f4e2m1",
    "bool": "uint1",
}
for _w in (8, 16, 32, 64):
    _ALIASES[f"i{_w}"] = f"int{_w}"
    _ALIASES[f"u{_w}"] = f"uint{_w}"

_ACCEPTED_FORMS = (
    "int1..int8, uint1..uint8, f{b}e{E}m{M} with 1+E+M = b, 2 <= b <= 8, E >= 1 "
    "(f4e2m1, f6e3m2, f8e4m3, ...), f16, bf16, f32, int16/int32/int64, "
    "uint16/uint32/uint64, i8..i64, u8..u64"
)


def all_dtypes() -> tuple[DataType, ...]:
    """Every type, low-bit ones first, in a stable order."""
    return tuple(_REGISTRY.values())


def lowbit_dtypes() -> tuple[DataType, ...]:
    """Every type of 1..8 bits (the ones that are bit-packed)."""
    return tuple(t for t in _REGISTRY.values() if t.is_lowbit)


_FLOAT_NAME = re.compile(r"f(\d+)e(\d+)m(\d+)")


def parse(name: str | DataType) -> DataType:
    """The `DataType` a name denotes; a `DataType` is returned as is.

    Raises `DTypeError` naming the accepted forms for an unknown name, and saying
    why for a float name whose fields do not add up.
    """
    if isinstance(name, DataType):
        return name
    if not isinstance(name, str):
        raise DTypeError(f"a data type is a name or a DataType, not {type(name).__name__}")
    key = name.strip().lower()
    key = _ALIASES.get(key, key)
    if key in _REGISTRY:
        return _REGISTRY[key]
    match = _FLOAT_NAME.fullmatch(key)
    if match:
        b, e, m = map(int, match.groups())
        if 1 + e + m != b:
            raise DTypeError(f"{name!r}: sign + exponent + mantissa bits = {1 + e + m}, not {b}")
        raise DTypeError(f"{name!r}: float formats need 2 <= bits <= 8 and E >= 1 "
                         f"(or f16, bf16, f32)")
    raise DTypeError(f"unknown data type {name!r}; accepted: {_ACCEPTED_FORMS}")
