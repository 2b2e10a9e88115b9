"""The frontend: kernels are ordinary Python functions, compiled to VM IR.

    @tv.kernel(num_warps=4)
    def vector_add(x: tv.ptr("f32", const=True), out: tv.ptr("f32"), n: tv.int32,
                   *, block: int = 1024):
        tv.grid(tv.cdiv(n, block))
        ...

    program = vector_add.specialize(block=256)   # an ir Program, cached per constants

Design, and why:

- **The signature is the contract.** Parameters annotated `tv.ptr(dtype, const=...)`
  or with a scalar dtype are the kernel's runtime arguments, in order; keyword-only
  parameters are compile-time constants (plain Python values: ints, dtypes, layouts).
  Keyword-only is what separates them because a launch passes runtime arguments
  positionally and constants by name, so the call site reads the same as the `def`.
  A keyword-only `num_warps` overrides the decorator's. Each distinct set of
  constants is one specialization, cached by value (constants must be hashable).

- **An AST interpreter, not tracing.** The function body is parsed
  (`inspect.getsourcelines`, keeping the file and line numbers) and its statements
  are walked one by one with an explicit symbol table. Tracing (just calling the
  function on proxies) cannot see Python `for`/`if` over runtime values, and would
  silently unroll or pick one branch; walking the AST lets `for i in tv.range(n)`
  become an IR `For` and `if x < n:` an IR `If`. Simple statements (assignments,
  expressions, asserts) are still run by Python itself: each is compiled once
  (cached) and `exec`'d with the function's globals plus the symbol table, so every
  Python feature inside an expression (helper calls, comprehensions, f-strings) works
  unchanged, on `Scalar`/`Tile` proxies (vm/frontend_values.py) that build IR.
  `and`/`or`/`not` and `a if c else b` are rewritten into calls that build IR when an
  operand is a runtime value (short-circuiting as Python does otherwise).

- **Compile-time vs runtime control flow is decided by the values.** `for` over
  `range(...)` with Python ints (or over any Python iterable) is unrolled at compile
  time, with `break`/`continue`; `tv.range(...)`, or `range` with a runtime bound, is
  an IR loop. `if` on a Python value visits one branch; on a runtime `Scalar` it is an
  IR `If`. This is the split of Triton's `tl.static_range`/`constexpr`, decided without
  annotations.

- **Carried variables.** IR values are immutable except scalar variables (`Let`,
  `AssignVar`) and register tensors updated by `assign`. Before a runtime loop or if,
  the names its body assigns (found by scanning the AST) that are already bound are
  *carried*: a scalar or Python number gets a fresh variable (`let`), and every
  rebinding in the body becomes `assign_var`; a register tile keeps its tensor, and
  every rebinding becomes `assign(outer, new)`. The name is then rebound to the
  variable/outer tensor, so the next iteration and the code after the loop read the
  updated value. Rebindings in one statement are applied together (`a, b = b, a + b`
  works), and other names that still refer to the old value are snapshotted first, so
  Python's value semantics hold. Other Python objects cannot change in a runtime
  construct (their value would depend on run-time data): rebinding one is an error.
  Names first bound inside a runtime construct are undefined after it (reading one
  is an error naming the construct's line).

- **Errors point at the user's line.** `builder.loc` is set before every statement
  (and refined to the exact line of a multi-line statement by looking for the
  kernel's own code on the Python stack), so every instruction carries its line.
  Every exception raised while building (a bad argument to a `tv` function, a shape
  mismatch, a Python error in user code) becomes a `VMError` whose `loc` is the
  user's file:line; the original exception stays reachable as `__context__`.

Limits: Python objects reachable only through containers (a list of tiles) are not
carried through runtime loops. A store into an item or attribute of an object bound
before a runtime construct (`ahead[j] = tile` in a `tv.range` body) is an error for
that reason; other Python side effects (list.append) inside a runtime construct happen
once at compile time, whatever the construct does at run time.
"""

from __future__ import annotations

import ast
import inspect
import textwrap
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from tilevm.dtypes import DataType, DTypeError, parse
from tilevm.ir.errors import SourceLoc, VMError
from tilevm.ir.stmt import Program
from tilevm.ir.types import PointerType
from tilevm.vm import frontend_values as fv
from tilevm.vm import interpreter
from tilevm.vm.kernel_compiler import KernelCompiler, check_warps
from tilevm.vm.logic_rewrite import RewriteLogic

# ---- specs used by the signature ---------------------------------------------------------


def ptr(dtype: DataType | str, const: bool = False) -> PointerType:
    """The annotation of a pointer parameter: `x: tv.ptr("f16", const=True)`.
    `const` pointers are only read (the backend may use the read-only cache)."""
    try:
        return PointerType(fv.as_dtype(dtype, "tv.ptr"), readonly=bool(const))
    except VMError as err:  # evaluated with the kernel's annotations: at the user's line
        raise fv.at_caller(err) from None


# ---- the kernel object -------------------------------------------------------------------

_REQUIRED = inspect.Parameter.empty


@dataclass(frozen=True)
class KernelParam:
    """A runtime parameter: a pointer (`PointerType`) or a scalar (`DataType`)."""

    name: str
    type: PointerType | DataType

    @property
    def is_pointer(self) -> bool:
        return isinstance(self.type, PointerType)

    def __str__(self) -> str:
        return f"{self.name}: {self.type}"


@dataclass(frozen=True)
class KernelSignature:
    params: tuple[KernelParam, ...]
    constants: tuple[tuple[str, Any], ...]  # (name, default or inspect.Parameter.empty)

    @property
    def constant_names(self) -> tuple[str, ...]:
        return tuple(name for name, _ in self.constants)

    def __str__(self) -> str:
        parts = [str(p) for p in self.params]
        if self.constants:
            parts.append("*")
            parts += [name if d is _REQUIRED else f"{name}={d!r}" for name, d in self.constants]
        return f"({', '.join(parts)})"


class SourceFunction:
    """A Python function the frontend compiles from its source: a kernel, or an inline
    helper (`what` names it in messages)."""

    what = "function"

    def __init__(self, fn: Callable[..., Any], decorator: str) -> None:
        if not inspect.isfunction(fn):
            raise VMError(f"{decorator} decorates a function, got {fv.describe(fn)}",
                          loc=fv.caller_loc())
        self.fn = fn
        self.name: str = fn.__name__
        self.source_file: str = inspect.getsourcefile(fn) or fn.__code__.co_filename
        # the first decorator's line (co_firstlineno)
        self.def_loc = SourceLoc(self.source_file, fn.__code__.co_firstlineno)
        self._tree: ast.FunctionDef | None = None
        self._compiled: dict[ast.AST, tuple[Any, bool]] = {}
        self.codes: set[Any] = set()  # every code object compiled from the source

    def _globals(self) -> dict[str, Any]:
        env = dict(self.fn.__globals__)
        code = self.fn.__code__
        for name, cell in zip(code.co_freevars, self.fn.__closure__ or ()):
            try:
                env[name] = cell.cell_contents
            except ValueError:  # an empty cell: a closure variable not assigned yet
                pass
        return env

    # ---- source ------------------------------------------------------------------------------
    def tree(self) -> ast.FunctionDef:
        """The function's AST, line numbers as in the source file, with the rewrites
        of `and`/`or`/`not`/`if-else` expressions applied."""
        if self._tree is None:
            try:
                lines, start = inspect.getsourcelines(self.fn)
            except (OSError, TypeError):
                raise VMError(f"cannot read the source of {self.what} {self.name}; it must be "
                              "defined in a file", loc=self.def_loc) from None
            module = ast.parse(textwrap.dedent("".join(lines)), filename=self.source_file)
            ast.increment_lineno(module, start - 1)
            node = module.body[0]
            if not isinstance(node, ast.FunctionDef):
                raise VMError(f"{self.what} {self.name} must be a plain (non-async) function",
                              loc=self.def_loc)
            node = RewriteLogic().visit(node)
            ast.fix_missing_locations(node)
            self._tree = node
        return self._tree

    def compiled(self, node: ast.AST, mode: str) -> tuple[Any, bool]:
        """`node` (a statement, or an expression for mode "eval") compiled, and whether it
        opens a nested scope (lambda, comprehension) that must see the symbol table
        through globals."""
        found = self._compiled.get(node)
        if found is None:
            if mode == "eval":
                wrapper: ast.AST = ast.Expression(body=node)  # type: ignore[arg-type]
            else:
                wrapper = ast.Module(body=[node], type_ignores=[])  # type: ignore[list-item]
            code = compile(wrapper, self.source_file, mode)
            self._add_codes(code)
            nested = any(isinstance(n, _SCOPES) for n in ast.walk(node))
            found = self._compiled[node] = (code, nested)
        return found

    def _add_codes(self, code: Any) -> None:
        self.codes.add(code)
        for c in code.co_consts:
            if inspect.iscode(c):
                self._add_codes(c)


class Kernel(SourceFunction):
    """A `@tv.kernel` function: specialize it to IR, or run it in the interpreter."""

    what = "kernel"

    def __init__(self, fn: Callable[..., Any], num_warps: int = 4) -> None:
        super().__init__(fn, "@tv.kernel")
        self.num_warps = check_warps(num_warps, self.def_loc)  # given at the decorator
        self.signature = self._read_signature()
        self._cache: dict[Any, Program] = {}

    def __repr__(self) -> str:
        return f"<tv.kernel {self.name}{self.signature}>"

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        raise VMError(f"a kernel is not called directly: use {self.name}.specialize(**constants) "
                      f"for its IR or {self.name}.interpret(*args, **constants) to run it; "
                      "inside a kernel, call plain Python helper functions instead",
                      loc=fv.caller_loc())

    # ---- signature -----------------------------------------------------------------------
    def _read_signature(self) -> KernelSignature:
        sig = inspect.signature(self.fn)
        params: list[KernelParam] = []
        constants: list[tuple[str, Any]] = []
        for p in sig.parameters.values():
            if p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD):
                raise VMError(f"kernel {self.name}: *{p.name} / **{p.name} parameters are not "
                              "supported; list the parameters", loc=self.def_loc)
            if p.kind is p.KEYWORD_ONLY:
                constants.append((p.name, p.default))
                continue
            if p.default is not p.empty:
                raise VMError(f"kernel {self.name}: runtime parameter {p.name} cannot have a "
                              "default; make it keyword-only (after *) to be a compile-time "
                              "constant", loc=self.def_loc)
            params.append(KernelParam(p.name, self._param_type(p)))
        return KernelSignature(tuple(params), tuple(constants))

    def _param_type(self, p: inspect.Parameter) -> PointerType | DataType:
        note = p.annotation
        hint = ("annotate it with tv.ptr(dtype) or a scalar dtype (tv.int32, tv.f32, ...); "
                "compile-time constants are keyword-only parameters (after *)")
        if note is p.empty:
            raise VMError(f"kernel {self.name}: parameter {p.name} has no annotation; {hint}",
                          loc=self.def_loc)
        if isinstance(note, str):
            note = self._eval_annotation(note, p.name)
        if isinstance(note, str):
            try:
                note = parse(note)
            except DTypeError:
                pass
        if isinstance(note, (PointerType, DataType)):
            return note
        raise VMError(f"kernel {self.name}: parameter {p.name} is annotated "
                      f"{fv.describe(note)}; {hint}", loc=self.def_loc)

    def _eval_annotation(self, text: str, name: str) -> Any:
        try:
            return eval(text, self._globals())  # noqa: S307 - the user's own annotation
        except VMError as err:  # tv.ptr with a bad dtype, say
            raise VMError(f"kernel {self.name}: parameter {name}: {err.message}",
                          loc=self.def_loc) from None
        except Exception:
            return text

    # ---- specialization --------------------------------------------------------------------
    def bind_constants(self, constants: dict[str, Any]) -> dict[str, Any]:
        """Every constant's value (given or default), in declaration order."""
        expected = dict(self.signature.constants)
        unknown = [k for k in constants if k not in expected]
        listing = ", ".join(n if d is _REQUIRED else f"{n}={d!r}" for n, d in expected.items())
        listing = listing or "none"
        if unknown:
            raise VMError(f"kernel {self.name} has no compile-time constant "
                          f"{', '.join(map(repr, unknown))}; its constants are: {listing}",
                          loc=self.def_loc)
        missing = [n for n, d in expected.items() if d is _REQUIRED and n not in constants]
        if missing:
            raise VMError(f"kernel {self.name} needs the compile-time constant(s) "
                          f"{', '.join(missing)}; its constants are: {listing}",
                          loc=self.def_loc)
        return {n: constants.get(n, d) for n, d in expected.items()}

    def specialize(self, **constants: Any) -> Program:
        """The kernel's IR for these compile-time constants (cached by their values)."""
        values = self.bind_constants(constants)
        key = tuple((name, _freeze(name, v, self)) for name, v in values.items())
        program = self._cache.get(key)
        if program is None:
            program = KernelCompiler(self, values).compile()
            self._cache[key] = program
        return program

    def interpret(self, *args: Any, **kwargs: Any) -> Any:
        """Specialize with the keyword constants and run the program on the reference
        interpreter with `args` (runtime arguments may also be passed by name)."""
        names = [p.name for p in self.signature.params]
        constants = {k: v for k, v in kwargs.items() if k not in names}
        by_name = {k: v for k, v in kwargs.items() if k in names}
        if len(args) > len(names):
            raise VMError(f"kernel {self.name} takes {len(names)} runtime argument(s) "
                          f"({', '.join(names)}), got {len(args)}")
        full = list(args)
        for name in names[len(args):]:
            if name not in by_name:
                raise VMError(f"kernel {self.name}: missing runtime argument {name}")
            full.append(by_name.pop(name))
        if by_name:
            raise VMError(f"kernel {self.name}: runtime argument(s) {', '.join(by_name)} "
                          "given twice")
        program = self.specialize(**constants)
        return interpreter.run(program, full)

_SCOPES = (ast.Lambda, ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)


class Inline(SourceFunction):
    """A `@tv.inline` helper: called inside a kernel (or another inline helper), its body
    is compiled into the caller as a kernel's is, so it may hold `tv.range` loops and
    `if`s on runtime values, which a plain Python helper cannot (it runs at compile time
    as Python). Its parameters are bound to the call's arguments (any Python values:
    tiles, scalars, constants) and it may `return` values (at its top level, not inside
    a runtime construct). Names it binds are its own; results flow back only through
    `return` and memory."""

    what = "inline function"

    def __init__(self, fn: Callable[..., Any]) -> None:
        super().__init__(fn, "@tv.inline")
        self.signature = inspect.signature(fn)

    def __repr__(self) -> str:
        return f"<tv.inline {self.name}{self.signature}>"

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        caller = fv.current(f"tv.inline function {self.name}")
        try:
            bound = self.signature.bind(*args, **kwargs)
        except TypeError as err:
            raise VMError(f"{self.name}(): {err}") from None
        bound.apply_defaults()
        return caller.inline_call(self, dict(bound.arguments))  # type: ignore[attr-defined]


def inline(fn: Callable[..., Any]) -> Inline:
    """Decorator: `@tv.inline` (see `Inline`)."""
    return Inline(fn)


def kernel(fn: Callable[..., Any] | None = None, *, num_warps: int = 4) -> Any:
    """Decorator: `@tv.kernel` or `@tv.kernel(num_warps=8)`."""
    if fn is None:
        return lambda f: Kernel(f, num_warps)
    return Kernel(fn, num_warps)


def _freeze(name: str, value: Any, k: Kernel) -> Any:
    """A hashable cache key for a constant (typed, so that 1, 1.0 and True differ)."""
    if isinstance(value, (list, tuple)):
        return (type(value).__name__, tuple(_freeze(name, v, k) for v in value))
    if isinstance(value, dict):
        return ("dict", tuple(sorted((repr(a), _freeze(name, b, k)) for a, b in value.items())))
    try:
        hash(value)
    except TypeError:
        raise VMError(f"kernel {k.name}: compile-time constant {name}={fv.describe(value)} is "
                      "not hashable (specializations are cached by their constants)",
                      loc=k.def_loc) from None
    return (type(value), value)
