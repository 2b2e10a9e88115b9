"""The compilation of one specialization of a kernel (`vm.frontend` describes the design):
`KernelCompiler` walks the kernel's AST once, for one set of constants, driving an IR
`Builder`; simple statements run as Python on `Scalar`/`Tile` proxies, `for`/`if` over
runtime values become IR loops and branches (`RuntimeRange` is what `tv.range`
returns), and names rebound inside them are carried (`vm.symbols`).
"""

from __future__ import annotations

import ast
import builtins
import numbers
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Protocol

from tilevm.dtypes import DataType
from tilevm.ir.builder import Builder
from tilevm.ir.errors import SourceLoc, VMError
from tilevm.ir.expr import Expr, Var, free_vars
from tilevm.ir.stmt import Program
from tilevm.ir.types import MemorySpace, PointerType, Tensor
from tilevm.vm import frontend_values as fv
from tilevm.vm.frontend_values import Scalar, Tile
from tilevm.vm.logic_rewrite import LOGIC_HELPERS, is_runtime
from tilevm.vm.symbols import Frame, Slot, SymbolTable, Undefined, assigned_names, same_python_value


class KernelDefinition(Protocol):
    """What the compiler reads of a `vm.frontend.Kernel` (which imports this module)."""

    name: str
    num_warps: int
    source_file: str
    def_loc: SourceLoc
    codes: set[Any]
    signature: Any  # a vm.frontend.KernelSignature

    def tree(self) -> ast.FunctionDef: ...

    def compiled(self, node: ast.AST, mode: str) -> tuple[Any, bool]: ...

    def _globals(self) -> dict[str, Any]: ...


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


def check_warps(num_warps: Any, loc: SourceLoc | None = None) -> int:
    """`num_warps` as an int, or a `VMError` at `loc` (the kernel's decorator line)."""
    if isinstance(num_warps, bool) or not isinstance(num_warps, numbers.Integral) \
            or not 1 <= num_warps <= 32:
        raise VMError(f"num_warps must be an int in 1..32, got {num_warps!r}", loc=loc)
    return int(num_warps)


def constant_text(value: Any) -> str:
    return str(value) if isinstance(value, DataType) else repr(value)


# ---- compilation -------------------------------------------------------------------------

class _Break(Exception):
    pass


class _Continue(Exception):
    pass


class _Return(Exception):
    def __init__(self, value: Any = None) -> None:
        self.value = value


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


class KernelCompiler(fv.BuildContext):
    """Walks a kernel's AST once, for one set of constants, driving an ir Builder."""

    def __init__(self, k: KernelDefinition, constants: dict[str, Any]) -> None:
        warps = constants.get("num_warps", k.num_warps)
        super().__init__(Builder(k.name, check_warps(warps, k.def_loc)), k.source_file, k.codes)
        self.k = k
        self.constants = constants
        self.globals = k._globals()
        self.globals.update(LOGIC_HELPERS)
        self.symtab = SymbolTable()
        self.frames: list[Frame] = []
        self.ctrl: list[str] = []  # "static", "runtime for loop", "runtime if"
        self.slot_vars: set[Var] = set()  # the variables declared for carried names
        self.returns_values = False  # an inline helper's body (`inline_call`)

    # ---- driver ------------------------------------------------------------------------------
    def compile(self) -> Program:
        tree = self.k.tree()
        b = self.builder
        b.constants = tuple((n, constant_text(v)) for n, v in self.constants.items())
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

    def inline_call(self, helper: Any, arguments: dict[str, Any]) -> Any:
        """Compile `helper`'s body (a `vm.frontend.Inline`) into this kernel, its
        parameters bound to `arguments`, and return what it returns (None without a
        `return`). It builds into the same IR, with its own names and control flow."""
        child = KernelCompiler.__new__(KernelCompiler)
        fv.BuildContext.__init__(child, self.builder, helper.source_file, helper.codes)
        child.k, child.constants, child.returns_values = helper, {}, True
        child.globals = {**helper._globals(), **LOGIC_HELPERS}
        child.symtab = SymbolTable()
        child.symtab.update(arguments)
        child.frames, child.ctrl, child.slot_vars = [], [], set()
        loc, hint = self.builder.loc, self.builder.name_hint
        fv.push(child)
        try:
            child.visit_block(helper.tree().body)
        except _Return as done:
            return done.value
        finally:
            fv.pop(child)
            self.builder.loc, self.builder.name_hint = loc, hint
        return None

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
        if self.returns_values:
            self._check_static_exit("return", "return after the loop or if instead")
            raise _Return(None if value is None else self.evaluate(value))
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
        frame = self.enter(node, "if", assigned_names(node.body) | assigned_names(node.orelse))
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
                if is_runtime(cond):
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
        frame = self.enter(node, "for loop", assigned_names(node.body) - {name})
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
    def enter(self, node: ast.stmt, kind: str, names: set[str]) -> Frame:
        """Open a runtime construct: carry the names it assigns that are bound already."""
        before = set(self.symtab.defined())
        slots: dict[str, Slot] = {}
        for name in sorted(names & before):
            value = dict.__getitem__(self.symtab, name)
            if isinstance(value, Scalar) and self._reusable(name, value):
                slot = Slot("scalar", value, var=value.expr)  # type: ignore[arg-type]
            elif isinstance(value, Scalar) or fv.is_number(value):
                var = self.builder.let(fv.to_expr(value), name=name)
                self.slot_vars.add(var)
                slot = Slot("scalar", Scalar(var), var=var)
            elif isinstance(value, Tile) and value.space is MemorySpace.REGISTER:
                tensor = value.tensor
                if any(n != name and isinstance(v, Tile) and v.tensor == tensor
                       for n, v in self.symtab.items()):
                    tensor = self._copy(tensor)  # another name keeps the value before
                slot = Slot("tile", Tile(tensor), tensor=tensor)
            else:
                slot = Slot("python", value)
            slots[name] = slot
            self.symtab[name] = slot.proxy
        frame = Frame(kind, node.lineno, slots, before)
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

    def leave(self, frame: Frame) -> None:
        assert self.frames[-1] is frame
        self.frames.pop()
        for name, value in list(self.symtab.items()):
            if name not in frame.before and not isinstance(value, Undefined):
                self.symtab[name] = Undefined(
                    f"{name} is assigned only inside a runtime {frame.kind} at line "
                    f"{frame.line}; define it before the {frame.kind.split()[0]}")

    def _copy(self, tensor: Tensor) -> Tensor:
        return self.builder.cast(tensor, tensor.dtype, name=tensor.name.split(".")[0])

    def sync(self, frame: Frame) -> None:
        """After a statement inside a runtime construct: turn rebindings of carried names
        into `assign_var` / `assign`, and bind the names back to their variables."""
        changed: list[tuple[str, Slot, Any]] = []
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
                if not same_python_value(new, slot.proxy):
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
        ready: list[tuple[str, Slot, Any]] = []
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

    def _carried_value(self, name: str, slot: Slot, new: Any) -> Expr | Tensor:
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
