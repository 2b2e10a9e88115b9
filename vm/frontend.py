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
import builtins
import inspect
import numbers
import textwrap
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from tilevm.dtypes import DataType, DTypeError, parse
from tilevm.ir.builder import Builder
from tilevm.ir.errors import SourceLoc, VMError
from tilevm.ir.expr import Binary, Expr, Select, Unary, Var, free_vars
from tilevm.ir.stmt import Program
from tilevm.ir.types import MemorySpace, PointerType, Tensor
from tilevm.vm import frontend_values as fv
from tilevm.vm.frontend_values import Scalar, Tile

# ---- specs used by the signature ---------------------------------------------------------


def ptr(dtype: DataType | str, const: bool = False) -> PointerType:
    """The annotation of a pointer parameter: `x: tv.ptr("f16", const=True)`.
    `const` pointers are only read (the backend may use the read-only cache)."""
    return PointerType(fv.as_dtype(dtype, "tv.ptr"), readonly=bool(const))


@dataclass(frozen=True)
class RuntimeRange:
    """What `tv.range(...)` returns: a loop the IR keeps (never unrolled here)."""

    start: Any
    stop: Any
    step: Any = 1
    unroll: int | None = None

    def __iter__(self):
        raise VMError("a tv.range loop must be a `for` statement of the kernel itself (helper "
                      "functions run as plain Python at compile time; use range there)")


def make_range(start: Any, stop: Any = None, step: Any = 1, *,
               unroll: int | None = None) -> RuntimeRange:
    if stop is None:
        start, stop = 0, start
    for name, v in (("start", start), ("stop", stop), ("step", step)):
        if not (isinstance(v, Scalar) or fv.is_number(v)) or isinstance(v, float):
            raise VMError(f"tv.range {name} must be an int or a runtime int, got {fv.describe(v)}")
    if isinstance(step, numbers.Integral) and step == 0:
        raise VMError("tv.range step must not be zero")
    if unroll is not None:
        unroll = fv.static_int(unroll, "tv.range unroll")
        if unroll < 1:
            raise VMError("tv.range unroll must be >= 1 (1: never unroll)")
    return RuntimeRange(start, stop, step, unroll)


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


class Kernel:
    """A `@tv.kernel` function: specialize it to IR, or run it in the interpreter."""

    def __init__(self, fn: Callable[..., Any], num_warps: int = 4) -> None:
        if not inspect.isfunction(fn):
            raise VMError(f"@tv.kernel decorates a function, got {fv.describe(fn)}")
        self.fn = fn
        self.name: str = fn.__name__
        self.num_warps = _check_warps(num_warps)
        self.source_file: str = inspect.getsourcefile(fn) or fn.__code__.co_filename
        self.def_loc = SourceLoc(self.source_file, fn.__code__.co_firstlineno)
        self.signature = self._read_signature()
        self._cache: dict[Any, Program] = {}
        self._tree: ast.FunctionDef | None = None
        self._compiled: dict[ast.AST, tuple[Any, bool]] = {}
        self.codes: set[Any] = set()  # every code object compiled from the source

    def __repr__(self) -> str:
        return f"<tv.kernel {self.name}{self.signature}>"

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        raise VMError(f"a kernel is not called directly: use {self.name}.specialize(**constants) "
                      f"for its IR or {self.name}.interpret(*args, **constants) to run it; "
                      "inside a kernel, call plain Python helper functions instead")

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
            note = self._eval_annotation(note)
        if isinstance(note, str):
            try:
                note = parse(note)
            except DTypeError:
                pass
        if isinstance(note, (PointerType, DataType)):
            return note
        raise VMError(f"kernel {self.name}: parameter {p.name} is annotated "
                      f"{fv.describe(note)}; {hint}", loc=self.def_loc)

    def _eval_annotation(self, text: str) -> Any:
        try:
            return eval(text, self._globals())  # noqa: S307 - the user's own annotation
        except Exception:
            return text

    def _globals(self) -> dict[str, Any]:
        env = dict(self.fn.__globals__)
        code = self.fn.__code__
        for name, cell in zip(code.co_freevars, self.fn.__closure__ or ()):
            try:
                env[name] = cell.cell_contents
            except ValueError:  # an empty cell: a closure variable not assigned yet
                pass
        return env

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
            program = _Compiler(self, values).compile()
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
        from tilevm.vm import interpreter  # written alongside; imported when first needed

        return interpreter.run(program, full)

    # ---- source ------------------------------------------------------------------------------
    def tree(self) -> ast.FunctionDef:
        """The function's AST, line numbers as in the source file, with the rewrites
        of `and`/`or`/`not`/`if-else` expressions applied."""
        if self._tree is None:
            try:
                lines, start = inspect.getsourcelines(self.fn)
            except (OSError, TypeError):
                raise VMError(f"cannot read the source of kernel {self.name}; kernels must be "
                              "defined in a file", loc=self.def_loc) from None
            module = ast.parse(textwrap.dedent("".join(lines)), filename=self.source_file)
            ast.increment_lineno(module, start - 1)
            node = module.body[0]
            if not isinstance(node, ast.FunctionDef):
                raise VMError(f"kernel {self.name} must be a plain (non-async) function",
                              loc=self.def_loc)
            node = _RewriteLogic().visit(node)
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


_SCOPES = (ast.Lambda, ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)


def kernel(fn: Callable[..., Any] | None = None, *, num_warps: int = 4) -> Any:
    """Decorator: `@tv.kernel` or `@tv.kernel(num_warps=8)`."""
    if fn is None:
        return lambda f: Kernel(f, num_warps)
    return Kernel(fn, num_warps)


def _check_warps(num_warps: Any) -> int:
    if isinstance(num_warps, bool) or not isinstance(num_warps, numbers.Integral) \
            or not 1 <= num_warps <= 32:
        raise VMError(f"num_warps must be an int in 1..32, got {num_warps!r}")
    return int(num_warps)


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


def _constant_text(value: Any) -> str:
    return str(value) if isinstance(value, DataType) else repr(value)


# ---- the logical-operator rewrite ---------------------------------------------------------------

class _RewriteLogic(ast.NodeTransformer):
    """`a and b` -> `__tv_and(a, lambda: b)`, `not a` -> `__tv_not(a)`,
    `x if c else y` -> `__tv_select(c, lambda: x, lambda: y)`; annotated assignments lose
    their annotation. The helpers keep Python's meaning for Python values."""

    def visit_BoolOp(self, node: ast.BoolOp) -> ast.AST:
        self.generic_visit(node)
        name = "__tv_and" if isinstance(node.op, ast.And) else "__tv_or"
        args = [node.values[0]] + [_thunk(v) for v in node.values[1:]]
        return ast.copy_location(_call(name, args), node)

    def visit_UnaryOp(self, node: ast.UnaryOp) -> ast.AST:
        self.generic_visit(node)
        if isinstance(node.op, ast.Not):
            return ast.copy_location(_call("__tv_not", [node.operand]), node)
        return node

    def visit_IfExp(self, node: ast.IfExp) -> ast.AST:
        self.generic_visit(node)
        call = _call("__tv_select", [node.test, _thunk(node.body), _thunk(node.orelse)])
        return ast.copy_location(call, node)

    def visit_AnnAssign(self, node: ast.AnnAssign) -> ast.AST:
        self.generic_visit(node)
        if node.value is None:
            return ast.copy_location(ast.Pass(), node)
        return ast.copy_location(ast.Assign(targets=[node.target], value=node.value), node)


def _call(name: str, args: list[ast.expr]) -> ast.Call:
    return ast.Call(func=ast.Name(id=name, ctx=ast.Load()), args=args, keywords=[])


def _thunk(expr: ast.expr) -> ast.Lambda:
    empty = ast.arguments(posonlyargs=[], args=[], vararg=None, kwonlyargs=[], kw_defaults=[],
                          kwarg=None, defaults=[])
    return ast.copy_location(ast.Lambda(args=empty, body=expr), expr)


def _is_runtime(value: Any) -> bool:
    return isinstance(value, (Scalar, Tile))


def _no_tile(value: Any, op: str, instead: str) -> None:
    if isinstance(value, Tile):
        raise VMError(f"`{op}` on a tile is not elementwise; use {instead}")


def _tv_logic(op: str, first: Any, rest: tuple[Callable[[], Any], ...]) -> Any:
    """Python's `and`/`or` (short-circuit, returning an operand) on Python values; on a
    runtime Scalar, the IR's bool `and`/`or` of both sides."""
    value = first
    for thunk in rest:
        _no_tile(value, op, "&" if op == "and" else "|")
        if isinstance(value, Scalar):
            other = thunk()
            _no_tile(other, op, "&" if op == "and" else "|")
            value = Scalar(Binary(op, fv.to_bool_expr(value), fv.to_bool_expr(other)))
        elif bool(value) != (op == "and"):  # `and` stops at a falsy value, `or` at a truthy
            return value
        else:
            value = thunk()
    return value


def _tv_and(first: Any, *rest: Callable[[], Any]) -> Any:
    return _tv_logic("and", first, rest)


def _tv_or(first: Any, *rest: Callable[[], Any]) -> Any:
    return _tv_logic("or", first, rest)


def _tv_not(value: Any) -> Any:
    _no_tile(value, "not", "~")
    if isinstance(value, Scalar):
        return Scalar(Unary("not", fv.to_bool_expr(value)))
    return not value


def _tv_select(cond: Any, if_true: Callable[[], Any], if_false: Callable[[], Any]) -> Any:
    if isinstance(cond, Tile):
        raise VMError("`x if cond else y` with a tile condition: use tv.where(cond, x, y)")
    if not isinstance(cond, Scalar):
        return if_true() if cond else if_false()
    a, b = if_true(), if_false()
    if isinstance(a, Tile) or isinstance(b, Tile):
        from tilevm.vm.lang import where

        return where(cond, a, b)
    return Scalar(Select(fv.to_bool_expr(cond), fv.to_expr(a), fv.to_expr(b)))


_HELPERS = {"__tv_and": _tv_and, "__tv_or": _tv_or, "__tv_not": _tv_not,
            "__tv_select": _tv_select}


# ---- the symbol table --------------------------------------------------------------------

class Undefined:
    """The value of a name that has no value here (bound only inside a runtime construct)."""

    __slots__ = ("message",)

    def __init__(self, message: str) -> None:
        self.message = message


class SymbolTable(dict):
    """The kernel's local names. `exec` reads names through `__getitem__` (a dict
    subclass as locals), which turns a read of an undefined name into its message."""

    def __getitem__(self, name: str) -> Any:
        value = dict.__getitem__(self, name)
        if isinstance(value, Undefined):
            raise VMError(value.message)
        return value

    def defined(self) -> dict[str, Any]:
        return {k: v for k, v in self.items() if not isinstance(v, Undefined)}


# ---- compilation -------------------------------------------------------------------------

class _Break(Exception):
    pass


class _Continue(Exception):
    pass


class _Return(Exception):
    pass


@dataclass
class _Slot:
    """A name carried through a runtime construct."""

    kind: str  # "scalar", "tile" or "python"
    proxy: Any  # what the name is bound to between statements
    var: Var | None = None
    tensor: Tensor | None = None


@dataclass
class _Frame:
    kind: str  # "for loop" or "if"
    line: int
    slots: dict[str, _Slot]
    before: set[str]


_UNSUPPORTED = {
    "FunctionDef": "nested function definitions are not supported in a kernel; define helper "
                   "functions at module level (they run at compile time on tv values)",
    "AsyncFunctionDef": "async functions are not supported in a kernel",
    "ClassDef": "class definitions are not supported in a kernel; define classes at module level",
    "Global": "global is not supported in a kernel; pass values as parameters or compile-time "
              "constants",
    "Nonlocal": "nonlocal is not supported in a kernel; pass values as parameters or "
                "compile-time constants",
    "Try": "try/except is not supported in a kernel; check conditions with tv.static_assert",
    "TryStar": "try/except* is not supported in a kernel",
    "With": "with statements are not supported in a kernel; call the tv functions directly",
    "AsyncWith": "async with is not supported in a kernel",
    "AsyncFor": "async for is not supported in a kernel; use for ... in tv.range(...)",
    "Match": "match statements are not supported in a kernel; use if/elif",
}


class _Compiler(fv.BuildContext):
    """Walks a kernel's AST once, for one set of constants, driving an ir Builder."""

    def __init__(self, k: Kernel, constants: dict[str, Any]) -> None:
        warps = constants.get("num_warps", k.num_warps)
        super().__init__(Builder(k.name, _check_warps(warps)), k.source_file, k.codes)
        self.k = k
        self.constants = constants
        self.globals = k._globals()
        self.globals.update(_HELPERS)
        self.symtab = SymbolTable()
        self.frames: list[_Frame] = []
        self.ctrl: list[str] = []  # "static", "runtime for loop", "runtime if"
        self.slot_vars: set[Var] = set()  # the variables declared for carried names

    # ---- driver ------------------------------------------------------------------------------
    def compile(self) -> Program:
        tree = self.k.tree()
        b = self.builder
        b.constants = tuple((n, _constant_text(v)) for n, v in self.constants.items())
        for p in self.k.signature.params:
            if isinstance(p.type, PointerType):
                self.symtab[p.name] = b.pointer_param(p.name, p.type.dtype, p.type.readonly)
            else:
                self.symtab[p.name] = Scalar(b.scalar_param(p.name, p.type))
        self.symtab.update(self.constants)
        fv.push(self)
        try:
            try:
                self.visit_block(tree.body)
            except _Return:
                pass
        finally:
            fv.pop(self)
        return b.build()

    def runtime_construct(self) -> str | None:
        if not self.frames:
            return None
        frame = self.frames[-1]
        return f"runtime {frame.kind} at line {frame.line}"

    def loc(self, line: int) -> SourceLoc:
        return SourceLoc(self.file, line)

    def visit_block(self, stmts: Iterable[ast.stmt]) -> None:
        for stmt in stmts:
            self.visit(stmt)

    def visit(self, node: ast.stmt) -> None:
        loc = self.loc(node.lineno)
        self.builder.loc = loc
        try:
            method = getattr(self, f"visit_{type(node).__name__}", None)
            if method is None:
                message = _UNSUPPORTED.get(type(node).__name__,
                                           f"{type(node).__name__} statements are not supported "
                                           "in a kernel")
                raise VMError(message)
            method(node)
            if self.frames:
                self.builder.loc = loc
                self.sync(self.frames[-1])
        except (_Break, _Continue, _Return):
            raise
        except VMError as e:
            if e.loc is not None:
                raise
            raise VMError(e.message, e.instruction, self._error_loc(e, loc)) from None
        except Exception as e:
            message = self._undefined_name(e) or f"{type(e).__name__}: {e}"
            raise VMError(message, loc=self._error_loc(e, loc)) from None

    def _error_loc(self, e: BaseException, default: SourceLoc) -> SourceLoc:
        """The innermost line of the kernel's own code in the traceback."""
        line = None
        tb = e.__traceback__
        while tb is not None:
            if tb.tb_frame.f_code in self.codes:
                line = tb.tb_lineno
            tb = tb.tb_next
        return default if line is None else self.loc(line)

    def _undefined_name(self, e: Exception) -> str | None:
        # A lambda or comprehension reads names through globals, where undefined names
        # are left out: report them with their message.
        name = getattr(e, "name", None)
        if isinstance(e, NameError) and name is not None:
            value = dict.get(self.symtab, name)
            if isinstance(value, Undefined):
                return value.message
        return None

    def run(self, node: ast.AST, mode: str) -> Any:
        code, nested = self.k.compiled(node, mode)
        env = self.globals
        if nested:  # a nested scope sees only globals: give it the symbol table there
            env = dict(self.globals)
            env.update(self.symtab.defined())
        if mode == "eval":
            return eval(code, env, self.symtab)  # noqa: S307 - the kernel's own source
        exec(code, env, self.symtab)  # noqa: S102
        return None

    def evaluate(self, node: ast.expr) -> Any:
        return self.run(node, "eval")

    # ---- simple statements ---------------------------------------------------------------------
    def visit_simple(self, node: ast.stmt) -> None:
        self.run(node, "exec")

    def visit_Assign(self, node: ast.Assign | ast.AugAssign) -> None:
        # Tensors built by `x = ...` are named after x in the IR (%x, %x.1, ...).
        targets = node.targets if isinstance(node, ast.Assign) else [node.target]
        if self.frames:
            self._check_no_outer_store(targets)
        if len(targets) == 1 and isinstance(targets[0], ast.Name):
            self.builder.name_hint = targets[0].id
        try:
            self.run(node, "exec")
        finally:
            self.builder.name_hint = None

    visit_AugAssign = visit_Assign

    def _check_no_outer_store(self, targets: list[ast.expr]) -> None:
        """Inside a runtime construct, an item or attribute store into a Python object
        bound before it (`ahead[j] = tile`) would run once, at compile time: the next
        iteration would not see it. An error, not a silently wrong kernel."""
        frame = self.frames[-1]
        pending = list(targets)
        while pending:
            target = pending.pop()
            if isinstance(target, ast.Tuple | ast.List):
                pending.extend(target.elts)
            elif isinstance(target, ast.Starred):
                pending.append(target.value)
            elif isinstance(target, ast.Subscript | ast.Attribute):
                base = target.value
                while isinstance(base, ast.Subscript | ast.Attribute):
                    base = base.value
                if isinstance(base, ast.Name) and base.id in frame.before:
                    raise VMError(
                        f"`{ast.unparse(target)} = ...` stores into {base.id}, a Python object "
                        f"bound before the {self.runtime_construct()}: the store happens once, "
                        "at compile time, not in each iteration at run time (a tile stored "
                        "there does not reach the next iteration). Give each carried value a "
                        "name of its own, or build the object inside the construct")

    visit_Expr = visit_Assert = visit_simple
    visit_Delete = visit_Import = visit_ImportFrom = visit_Raise = visit_simple

    def visit_Pass(self, node: ast.Pass) -> None:
        pass

    def visit_AnnAssign(self, node: ast.AnnAssign) -> None:  # rewritten away; kept for safety
        raise VMError("annotated assignments are not supported here")

    # ---- control flow --------------------------------------------------------------------------
    def visit_Return(self, node: ast.Return) -> None:
        value = node.value
        if value is not None and not (isinstance(value, ast.Constant) and value.value is None):
            raise VMError("a kernel cannot return a value; write results to memory with "
                          "tv.store_global")
        self._check_static_exit("return", "guard the rest of the kernel with if/else instead")
        raise _Return()

    def visit_Break(self, node: ast.Break) -> None:
        self._check_static_exit("break", "compute the loop bound instead, or guard the rest "
                                         "of the body with an if")
        raise _Break()

    def visit_Continue(self, node: ast.Continue) -> None:
        self._check_static_exit("continue", "guard the rest of the body with an if instead")
        raise _Continue()

    def _check_static_exit(self, what: str, instead: str) -> None:
        for kind in reversed(self.ctrl):
            if kind == "static" and what != "return":
                return
            if kind != "static":
                raise VMError(f"`{what}` inside a {kind} is not supported (where it goes is "
                              f"known only at run time); {instead}")
        if what != "return":
            raise VMError(f"`{what}` outside a loop")

    def visit_If(self, node: ast.If) -> None:
        cond = self.evaluate(node.test)
        if isinstance(cond, Tile):
            raise VMError("`if` on a tile: a tile has no single truth value; use tv.where, or "
                          "reduce it to a scalar (.max(dim), .sum(dim))")
        if not isinstance(cond, Scalar):
            self.visit_block(node.body if cond else node.orelse)
            return
        expr = fv.to_bool_expr(cond)
        frame = self.enter(node, "if", _assigned_names(node.body) | _assigned_names(node.orelse))
        self.ctrl.append("runtime if")
        try:
            with self.builder.if_then(expr):
                self.visit_block(node.body)
            if node.orelse:
                for name in list(self.symtab):  # names of the then-branch are not visible
                    if name not in frame.before:
                        del self.symtab[name]
                self.builder.loc = self.loc(node.orelse[0].lineno)
                with self.builder.otherwise():
                    self.visit_block(node.orelse)
        finally:
            self.ctrl.pop()
        self.leave(frame)

    def visit_While(self, node: ast.While) -> None:
        if node.orelse:
            raise VMError("while ... else is not supported in a kernel")
        self.ctrl.append("static")
        try:
            while True:
                cond = self.evaluate(node.test)
                if _is_runtime(cond):
                    raise VMError("while loops over runtime values are not supported; use "
                                  "`for i in tv.range(...)` with a bound, and an if inside")
                if not cond:
                    break
                try:
                    self.visit_block(node.body)
                except _Continue:
                    continue
                except _Break:
                    break
        finally:
            self.ctrl.pop()

    def visit_For(self, node: ast.For) -> None:
        if node.orelse:
            raise VMError("for ... else is not supported in a kernel")
        iterable = self._loop_iterable(node.iter)
        if isinstance(iterable, RuntimeRange):
            self._runtime_for(node, iterable)
        else:
            self._static_for(node, iterable)

    def _loop_iterable(self, it: ast.expr) -> Any:
        """A `RuntimeRange` for a runtime loop, else the Python iterable to unroll."""
        if isinstance(it, ast.Call) and not it.keywords and 1 <= len(it.args) <= 3 \
                and not any(isinstance(a, ast.Starred) for a in it.args) \
                and self.evaluate(it.func) is builtins.range:
            args = [self.evaluate(a) for a in it.args]
            if any(isinstance(a, Scalar) for a in args):
                return make_range(*args)
            return builtins.range(*args)  # Python's own range checks its arguments
        return self.evaluate(it)

    def _static_for(self, node: ast.For, iterable: Any) -> None:
        if isinstance(iterable, (Scalar, Tile)):
            raise VMError(f"cannot iterate over {iterable!r}; loop with "
                          "`for i in tv.range(n)` instead")
        self.ctrl.append("static")
        try:
            for value in iterable:
                self.builder.loc = self.loc(node.lineno)
                self._bind(node.target, value)
                try:
                    self.visit_block(node.body)
                except _Continue:
                    continue
                except _Break:
                    break
        finally:
            self.ctrl.pop()

    def _bind(self, target: ast.expr, value: Any) -> None:
        if isinstance(target, ast.Name):
            self.symtab[target.id] = value
        elif isinstance(target, (ast.Tuple, ast.List)) and \
                not any(isinstance(t, ast.Starred) for t in target.elts):
            items = list(value)
            if len(items) != len(target.elts):
                raise VMError(f"cannot unpack {len(items)} values into {len(target.elts)} names")
            for t, v in zip(target.elts, items):
                self._bind(t, v)
        else:
            raise VMError("a compile-time loop target must be a name or a tuple of names")

    def _runtime_for(self, node: ast.For, r: RuntimeRange) -> None:
        if not isinstance(node.target, ast.Name):
            raise VMError("the variable of a runtime loop must be a single name")
        name = node.target.id
        start, stop, step = (fv.to_expr(v, f"range {w}") for v, w in
                             zip((r.start, r.stop, r.step), ("start", "stop", "step")))
        frame = self.enter(node, "for loop", _assigned_names(node.body) - {name})
        self.ctrl.append("runtime for loop")
        try:
            with self.builder.for_range(start, stop, step, name=name, unroll=r.unroll) as var:
                self.symtab[name] = Scalar(var)
                self.visit_block(node.body)
        finally:
            self.ctrl.pop()
        self.leave(frame)
        self.symtab[name] = Undefined(
            f"{name} is the variable of the runtime loop at line {node.lineno}; it has no "
            "value after the loop (keep what you need in a variable defined before the loop)")

    # ---- carried variables -----------------------------------------------------------------------
    def enter(self, node: ast.stmt, kind: str, names: set[str]) -> _Frame:
        """Open a runtime construct: carry the names it assigns that are bound already."""
        before = set(self.symtab.defined())
        slots: dict[str, _Slot] = {}
        for name in sorted(names & before):
            value = dict.__getitem__(self.symtab, name)
            if isinstance(value, Scalar) and self._reusable(name, value):
                slot = _Slot("scalar", value, var=value.expr)  # type: ignore[arg-type]
            elif isinstance(value, Scalar) or fv.is_number(value):
                var = self.builder.let(fv.to_expr(value), name=name)
                self.slot_vars.add(var)
                slot = _Slot("scalar", Scalar(var), var=var)
            elif isinstance(value, Tile) and value.space is MemorySpace.REGISTER:
                tensor = value.tensor
                if any(n != name and isinstance(v, Tile) and v.tensor == tensor
                       for n, v in self.symtab.items()):
                    tensor = self._copy(tensor)  # another name keeps the value before
                slot = _Slot("tile", Tile(tensor), tensor=tensor)
            else:
                slot = _Slot("python", value)
            slots[name] = slot
            self.symtab[name] = slot.proxy
        frame = _Frame(kind, node.lineno, slots, before)
        self.frames.append(frame)
        return frame

    def _reusable(self, name: str, value: Scalar) -> bool:
        """Whether a nested construct may update the enclosing construct's variable
        directly: it must be one, and no other name may read it (a copy would change)."""
        var = value.expr
        if not isinstance(var, Var) or var not in self.slot_vars:
            return False
        return not any(n != name and isinstance(v, Scalar) and var in free_vars(v.expr)
                       for n, v in self.symtab.items())

    def leave(self, frame: _Frame) -> None:
        assert self.frames[-1] is frame
        self.frames.pop()
        for name, value in list(self.symtab.items()):
            if name not in frame.before and not isinstance(value, Undefined):
                self.symtab[name] = Undefined(
                    f"{name} is assigned only inside a runtime {frame.kind} at line "
                    f"{frame.line}; define it before the {frame.kind.split()[0]}")

    def _copy(self, tensor: Tensor) -> Tensor:
        return self.builder.cast(tensor, tensor.dtype, name=tensor.name.split(".")[0])

    def sync(self, frame: _Frame) -> None:
        """After a statement inside a runtime construct: turn rebindings of carried names
        into `assign_var` / `assign`, and bind the names back to their variables."""
        changed: list[tuple[str, _Slot, Any]] = []
        for name, slot in frame.slots.items():
            if name not in self.symtab:
                raise VMError(f"{name} is carried through the {self.runtime_construct()}; it "
                              "cannot be deleted")
            new = dict.__getitem__(self.symtab, name)
            if new is slot.proxy:
                continue
            if isinstance(new, Undefined):
                raise VMError(new.message)
            if slot.kind == "python":
                if not _same_python_value(new, slot.proxy):
                    self.symtab[name] = slot.proxy
                    raise VMError(
                        f"{name} holds {fv.describe(slot.proxy)}, a compile-time value; it "
                        f"cannot be reassigned inside the {self.runtime_construct()} (its "
                        "value would depend on run-time data). Compute it before, or make it "
                        "a runtime scalar or a register tile")
                self.symtab[name] = slot.proxy
                continue
            value = self._carried_value(name, slot, new)
            if value == slot.var or value == slot.tensor:  # the same value, a new proxy
                self.symtab[name] = slot.proxy
                continue
            changed.append((name, slot, value))
        if not changed:
            return
        b = self.builder
        target_vars = {s.var for _, s, _ in changed if s.var is not None}
        target_tensors = {s.tensor for _, s, _ in changed if s.tensor is not None}
        # 1. a new value that reads a variable updated before it (a, b = b, a + b) is
        #    computed before the updates
        ready: list[tuple[str, _Slot, Any]] = []
        done_vars: set[Var] = set()
        done_tensors: set[Tensor] = set()
        for name, slot, new in changed:
            if isinstance(new, Expr) and free_vars(new) & done_vars:
                new = b.let(new, name=f"{name}.next")
            elif isinstance(new, Tensor) and new in done_tensors:
                new = self._copy(new)
            if slot.var is not None:
                done_vars.add(slot.var)
            if slot.tensor is not None:
                done_tensors.add(slot.tensor)
            ready.append((name, slot, new))
        # 2. other names still holding the old values keep them
        names = {name for name, _, _ in changed}
        for name, value in list(self.symtab.items()):
            if name in names:
                continue
            if isinstance(value, Scalar) and free_vars(value.expr) & target_vars \
                    and not any(value is s.proxy for s in frame.slots.values()):
                self.symtab[name] = Scalar(b.let(value.expr, name=name))
            elif isinstance(value, Tile) and value.tensor in target_tensors:
                self.symtab[name] = Tile(self._copy(value.tensor))
        # 3. the updates
        for name, slot, new in ready:
            if slot.kind == "scalar":
                b.assign_var(slot.var, new)
            else:
                b.assign(slot.tensor, new)
            self.symtab[name] = slot.proxy

    def _carried_value(self, name: str, slot: _Slot, new: Any) -> Expr | Tensor:
        where = self.runtime_construct()
        if slot.kind == "scalar":
            assert slot.var is not None
            dtype = slot.var.dtype
            if isinstance(new, Tile):
                raise VMError(f"{name} is a scalar before the {where} and a tile inside it; "
                              "define it as a tile before (tv.full / tv.zeros)")
            if fv.is_number(new):
                if isinstance(new, float) and not dtype.is_float:
                    raise VMError(f"{name} is {dtype} before the {where} and becomes the float "
                                  f"{new!r} inside it; initialize it with a float (e.g. 0.0)")
                return fv.number_expr(new, dtype)
            if not isinstance(new, Scalar):
                raise VMError(f"{name} is a runtime scalar carried through the {where}; it "
                              f"cannot become {fv.describe(new)}")
            if new.dtype != dtype:
                raise VMError(f"{name} changes type inside the {where}, from {dtype} to "
                              f"{new.dtype}; give it that type before (e.g. 0.0 or "
                              f"x.to(tv.{new.dtype}))")
            return new.expr
        assert slot.tensor is not None
        old = slot.tensor
        if not isinstance(new, Tile):
            raise VMError(f"{name} is a register tile carried through the {where}; it cannot "
                          f"become {fv.describe(new)}")
        tensor = new.require_register(f"carrying {name} through the {where}")
        if tensor.dtype != old.dtype or tensor.type.static_shape != old.type.static_shape:
            raise VMError(f"{name} is a {old.dtype} tile of shape {list(old.type.static_shape)} "
                          f"before the {where} and becomes a {tensor.dtype} tile of shape "
                          f"{list(tensor.type.static_shape)} inside it; a carried tile keeps "
                          "its dtype and shape")
        if old.layout is not None and tensor.layout is not None and old.layout != tensor.layout:
            raise VMError(f"{name} changes layout inside the {where} ({old.layout} -> "
                          f"{tensor.layout}); a carried tile keeps its layout")
        return tensor


def _same_python_value(a: Any, b: Any) -> bool:
    if a is b:
        return True
    try:
        return type(a) is type(b) and bool(a == b)
    except Exception:
        return False


def _assigned_names(stmts: Iterable[ast.stmt]) -> set[str]:
    """Names a block (re)binds, nested blocks included (not nested scopes)."""
    found: set[str] = set()

    class Visitor(ast.NodeVisitor):
        def visit_Name(self, node: ast.Name) -> None:
            if isinstance(node.ctx, (ast.Store, ast.Del)):
                found.add(node.id)

        def visit_alias(self, node: ast.alias) -> None:
            found.add((node.asname or node.name).split(".")[0])

        def visit_Lambda(self, node: ast.Lambda) -> None:
            pass

        def _scope(self, node: ast.AST) -> None:
            for n in ast.walk(node):  # only := leaks out of a comprehension
                if isinstance(n, ast.NamedExpr) and isinstance(n.target, ast.Name):
                    found.add(n.target.id)

        visit_ListComp = visit_SetComp = visit_DictComp = visit_GeneratorExp = _scope

    visitor = Visitor()
    for stmt in stmts:
        visitor.visit(stmt)
    return found
