"""A tiny symbolic integer algebra for runtime sizes: polynomials with int coefficients.

    >>> M, K = Sym("M"), Sym("K")
    >>> e = 4 * M * K + 2 * K - 8
    >>> str(e), e.evaluate({"M": 3, "K": 128})
    ('4*K*M + 2*K - 8', 1784)
    >>> divisible_by(e, 8, {"K": 128}), divisible_by(e, 16, {"K": 128})
    (True, False)

An `Expr` is kept in one normal form (a sorted tuple of monomials with nonzero
coefficients), so `==` and `hash` decide equality of polynomials exactly, and an
`Expr` that is a constant compares and hashes equal to that int. Symbols range over
the integers; facts say that a symbol is a multiple of an int (`K % 128 == 0`).

Divisibility is decided exactly, not by a sufficient test: substitute each symbol by
its known multiple (`K = 128*k`), write the polynomial in the binomial basis
`prod_i C(t_i, k_i)` (which maps integers to integers; `t**p = sum_k S(p,k) k! C(t,k)`
with Stirling numbers S of the second kind). Its values are all multiples of `n` iff
every coefficient is (the coefficients are finite differences at 0, integer
combinations of values, and conversely), so the largest such `n` is their gcd:
`guaranteed_divisor`. The answer is the same whether symbols range over all integers,
the non-negative ones or the positive ones (a box of points suffices either way).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from tilevm.layouts.errors import LayoutError

# A monomial: (symbol name, power >= 1) pairs, sorted by name; () is the constant 1.
Monomial = tuple[tuple[str, int], ...]


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _mul_monomials(a: Monomial, b: Monomial) -> Monomial:
    powers = dict(a)
    for name, p in b:
        powers[name] = powers.get(name, 0) + p
    return tuple(sorted(powers.items()))


def _term_order(item: tuple[Monomial, int]) -> tuple:
    monomial = item[0]
    # Highest degree first, then by the symbols' names; the constant comes last.
    return (-sum(p for _, p in monomial), monomial)


@dataclass(frozen=True, eq=False)
class Expr:
    """A polynomial in named integer symbols with int coefficients, in normal form.

    Build with `Sym`, ints and `+ - *` (and `**` by a non-negative int); `Expr(terms)`
    normalizes any iterable of `(monomial, coefficient)` pairs.
    """

    terms: tuple[tuple[Monomial, int], ...] = ()

    def __post_init__(self) -> None:
        combined: dict[Monomial, int] = {}
        for monomial, coeff in self.terms:
            if not _is_int(coeff):
                raise LayoutError(f"coefficients are ints, got {coeff!r}")
            powers: dict[str, int] = {}
            for name, p in monomial:
                if not isinstance(name, str) or not name.isidentifier() or not _is_int(p) or p < 0:
                    raise LayoutError(f"bad monomial {monomial!r}: (name, power >= 0) pairs")
                powers[name] = powers.get(name, 0) + p
            key = tuple(sorted((n, p) for n, p in powers.items() if p))
            combined[key] = combined.get(key, 0) + coeff
        normal = tuple(sorted(((m, c) for m, c in combined.items() if c), key=_term_order))
        object.__setattr__(self, "terms", normal)

    # ---- inspection --------------------------------------------------------------------
    @property
    def is_constant(self) -> bool:
        return all(not m for m, _ in self.terms)

    @property
    def constant(self) -> int:
        """The value of a constant expression (LayoutError if it has symbols)."""
        if not self.is_constant:
            raise LayoutError(f"{self} is not a constant")
        return self.terms[0][1] if self.terms else 0

    @property
    def free_symbols(self) -> frozenset[str]:
        return frozenset(name for m, _ in self.terms for name, _ in m)

    @property
    def degree(self) -> int:
        return max((sum(p for _, p in m) for m, _ in self.terms), default=0)

    # ---- arithmetic --------------------------------------------------------------------
    def __add__(self, other: Expr | int) -> Expr:
        other = _coerce(other)
        if other is None:
            return NotImplemented
        return Expr(self.terms + other.terms)

    __radd__ = __add__

    def __neg__(self) -> Expr:
        return Expr(tuple((m, -c) for m, c in self.terms))

    def __pos__(self) -> Expr:
        return self

    def __sub__(self, other: Expr | int) -> Expr:
        other = _coerce(other)
        if other is None:
            return NotImplemented
        return self + (-other)

    def __rsub__(self, other: Expr | int) -> Expr:
        other = _coerce(other)
        if other is None:
            return NotImplemented
        return other + (-self)

    def __mul__(self, other: Expr | int) -> Expr:
        other = _coerce(other)
        if other is None:
            return NotImplemented
        return Expr(tuple((_mul_monomials(ma, mb), ca * cb)
                          for ma, ca in self.terms for mb, cb in other.terms))

    __rmul__ = __mul__

    def __pow__(self, exponent: int) -> Expr:
        if not _is_int(exponent) or exponent < 0:
            return NotImplemented
        out = const(1)
        for _ in range(exponent):
            out = out * self
        return out

    # ---- equality ----------------------------------------------------------------------
    def __eq__(self, other: object) -> bool:
        other_expr = _coerce(other)
        if other_expr is None:
            return NotImplemented
        return self.terms == other_expr.terms

    def __hash__(self) -> int:
        # A constant hashes like its int, since it compares equal to it.
        return hash(self.constant) if self.is_constant else hash(self.terms)

    # ---- evaluation --------------------------------------------------------------------
    def evaluate(self, bindings: Mapping[str, int]) -> int:
        """The value under `bindings` (symbol name -> int); extra names are ignored."""
        missing = sorted(self.free_symbols - set(bindings))
        if missing:
            raise LayoutError(f"cannot evaluate {self}: no value for {', '.join(missing)}")
        for name in self.free_symbols:
            if not _is_int(bindings[name]):
                raise LayoutError(f"symbol {name} must be bound to an int, "
                                  f"got {bindings[name]!r}")
        return sum(c * math.prod(bindings[n] ** p for n, p in m) for m, c in self.terms)

    def subs(self, bindings: Mapping[str, Expr | int]) -> Expr:
        """Replace the bound symbols by ints or expressions; others stay symbolic."""
        out = const(0)
        for monomial, coeff in self.terms:
            term = const(coeff)
            for name, p in monomial:
                value = bindings.get(name)
                factor = Sym(name) if value is None else _coerce(value)
                if factor is None:
                    raise LayoutError(f"symbol {name} must be bound to an int or Expr, "
                                      f"got {value!r}")
                term = term * factor ** p
            out = out + term
        return out

    # ---- text --------------------------------------------------------------------------
    def __str__(self) -> str:
        if not self.terms:
            return "0"
        out = []
        for i, (monomial, coeff) in enumerate(self.terms):
            sign = "-" if coeff < 0 else "+"
            mag = abs(coeff)
            factors = [n if p == 1 else f"{n}**{p}" for n, p in monomial]
            if mag != 1 or not factors:
                factors.insert(0, str(mag))
            body = "*".join(factors)
            if i == 0:
                out.append(f"-{body}" if sign == "-" else body)
            else:
                out.append(f" {sign} {body}")
        return "".join(out)

    def __repr__(self) -> str:
        return f"Expr({str(self)!r})"


def const(value: int) -> Expr:
    """The constant expression `value`."""
    if not _is_int(value):
        raise LayoutError(f"a constant is an int, got {value!r}")
    return Expr((((), value),))


def Sym(name: str) -> Expr:  # capitalized: it reads as a constructor, like sympy's Symbol
    """The symbol `name` (a Python identifier), as an expression."""
    if not isinstance(name, str) or not name.isidentifier():
        raise LayoutError(f"a symbol name is an identifier, got {name!r}")
    return Expr(((((name, 1),), 1),))


def _coerce(value: object) -> Expr | None:
    if isinstance(value, Expr):
        return value
    if _is_int(value):
        return const(value)
    return None


def as_expr(value: Expr | int) -> Expr:
    """An int or Expr as an Expr (LayoutError otherwise)."""
    out = _coerce(value)
    if out is None:
        raise LayoutError(f"expected an int or a symbolic Expr, got {value!r}")
    return out


def simplify(value: Expr | int) -> Expr | int:
    """An int for constants, the Expr otherwise: how layouts store sizes."""
    expr = as_expr(value)
    return expr.constant if expr.is_constant else expr


# ---- divisibility ------------------------------------------------------------------------

@functools.cache
def _falling_coefficients(p: int) -> tuple[int, ...]:
    """`t**p = sum_k c[k] * C(t, k)`: c[k] = k! * S(p, k) (Stirling, second kind)."""
    stirling = [1] + [0] * p  # S(0, k)
    for n in range(1, p + 1):
        row = [0] * (p + 1)
        for k in range(1, n + 1):
            row[k] = k * stirling[k] + stirling[k - 1]
        stirling = row
    return tuple(math.factorial(k) * stirling[k] for k in range(p + 1))


def _normalize_facts(facts: Mapping[str | Expr, int] | None) -> dict[str, int]:
    out: dict[str, int] = {}
    for key, modulus in (facts or {}).items():
        if isinstance(key, Expr):
            if key.terms and len(key.terms) == 1 and key.terms[0][1] == 1 \
                    and len(key.terms[0][0]) == 1 and key.terms[0][0][0][1] == 1:
                key = key.terms[0][0][0][0]
            else:
                raise LayoutError(f"a divisibility fact is about one symbol, got {key}")
        if not isinstance(key, str) or not key.isidentifier():
            raise LayoutError(f"a divisibility fact names a symbol, got {key!r}")
        if not _is_int(modulus) or modulus < 1:
            raise LayoutError(f"fact {key} % {modulus!r} == 0: the modulus must be an int >= 1")
        out[key] = math.lcm(out.get(key, 1), modulus)
    return out


def guaranteed_divisor(expr: Expr | int, facts: Mapping[str | Expr, int] | None = None) -> int:
    """The largest `n` that divides `expr` for every binding that satisfies `facts`.

    `facts` maps a symbol (name or `Sym`) to an int it is a multiple of:
    `{"K": 128}` says `K % 128 == 0`. Returns 0 for the zero polynomial (every `n`
    divides it). Exact; see the module docstring.
    """
    expr = as_expr(expr)
    multiples = _normalize_facts(facts)
    g = 0
    # Substitute s = m_s * t_s, then expand each monomial in the binomial basis; the
    # coefficients of distinct binomial products are summed before the gcd.
    binomial: dict[tuple[tuple[str, int], ...], int] = {}
    for monomial, coeff in expr.terms:
        scale = coeff * math.prod(multiples.get(n, 1) ** p for n, p in monomial)
        partial: dict[tuple[tuple[str, int], ...], int] = {(): scale}
        for name, p in monomial:
            nxt: dict[tuple[tuple[str, int], ...], int] = {}
            for key, c in partial.items():
                for k, ck in enumerate(_falling_coefficients(p)):
                    if ck:
                        new_key = key + ((name, k),) if k else key
                        nxt[new_key] = nxt.get(new_key, 0) + c * ck
            partial = nxt
        for key, c in partial.items():
            binomial[key] = binomial.get(key, 0) + c
    for c in binomial.values():
        g = math.gcd(g, c)
    return g


def divisible_by(expr: Expr | int, n: int,
                 facts: Mapping[str | Expr, int] | None = None) -> bool:
    """Whether `n` divides `expr` for every binding that satisfies `facts` (exact).

    `divisible_by(64 * M + K, 16, {"K": 128})` is True; without the fact it is False.
    """
    if not _is_int(n) or n < 1:
        raise LayoutError(f"divisible_by needs an int n >= 1, got {n!r}")
    return guaranteed_divisor(expr, facts) % n == 0


def free_symbols(values: Iterable[Expr | int]) -> frozenset[str]:
    """Every symbol that appears in any of `values`."""
    return frozenset().union(*(as_expr(v).free_symbols for v in values))
