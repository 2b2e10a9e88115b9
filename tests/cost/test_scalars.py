"""The cost model's generated scalar functions (cost/scalars.py) against the IR's own
evaluator (ir/evaluate.py): the same value, or the same error, for every expression."""

from hypothesis import given, settings
from hypothesis import strategies as st

from tests.program_strategies import ci_examples, int_exprs
from tilevm.cost.scalars import compile_expr
from tilevm.dtypes import parse
from tilevm.ir.errors import VMError
from tilevm.ir.evaluate import evaluate
from tilevm.ir.expr import Binary, BlockIndex, ScalarCast, Select, Var, const

I32 = parse("int32")
A, B = Var("a", I32), Var("b", I32)
LEAVES = [A, B, BlockIndex(0), BlockIndex(2)]
INT32 = st.one_of(st.integers(-2 ** 31, 2 ** 31 - 1), st.sampled_from([0, -1, 1, -2 ** 31]))


def outcome(run):
    try:
        return run()
    except VMError as err:
        return ("error", err.message)


def expressions():
    """int_exprs over variables and block indices, with divisors that may be zero and
    nodes shared by both sides of an operation (one object, computed once)."""
    inner = int_exprs(LEAVES, max_depth=3)
    return st.one_of(
        inner,
        st.builds(Binary, st.sampled_from(["//", "%", "cdiv"]), inner, inner),
        inner.map(lambda e: Binary("*", e, Binary("+", e, const(1)))),
        inner.map(lambda e: ScalarCast(Binary("-", e, const(3)), parse("int8"))),
    )


@settings(max_examples=ci_examples(300))
@given(expressions(), INT32, INT32, st.tuples(INT32, INT32, INT32))
def test_generated_function_equals_the_evaluator(e, a, b, block):
    values = {A: a, B: b}
    expected = outcome(lambda: evaluate(e, values.__getitem__, block))
    assert outcome(lambda: compile_expr(e)(values.__getitem__, block)) == expected


def test_only_the_side_a_select_takes_is_evaluated():
    never = Binary("//", const(1), const(0))  # a zero divisor: an error if evaluated
    e = Select(Binary("<", A, const(0)), never, Binary("+", A, const(1)))
    assert compile_expr(e)({A: 5}.__getitem__, (0, 0, 0)) == 6
    assert outcome(lambda: compile_expr(e)({A: -5}.__getitem__, (0, 0, 0)))[0] == "error"
