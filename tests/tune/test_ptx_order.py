"""tune.ptx_order: the dependency graph of PTX runs and random legal orders of them.

Checked against an independent criterion of legality (`check_order`): in the new order
every register read sees the same definition as in the original, every register ends
with the same last definition, and memory operations that conflict (one writes) keep
their order. Fault injection: an order that breaks one dependency is caught by it.
"""

from __future__ import annotations

import random
from collections import Counter

import pytest
from kernel_harness import ROOT, compile_once
from ptx_legality import check_order

from tilevm.backend.ptxas import PtxasNotFoundError, check_ptx, find_ptxas
from tilevm.bench.examples import load_example
from tilevm.cli import main
from tilevm.dtypes import parse
from tilevm.kernels.matmul_launch import schedule_kernel
from tilevm.kernels.tilings import default_schedule
from tilevm.tune.ptx_order import PtxOrder, PtxOrderError, ptx_digest
from tilevm.tune.variants import ordered_ptx

SEEDS = range(5)


def corpus():
    """(name, arch, PTX) of examples and library kernels, sm_80 and sm_90a."""
    examples = {name: load_example(name) for name in ("matmul", "softmax", "attention")}
    programs = [
        ("matmul", "sm_80", examples["matmul"].matmul.specialize()),
        ("softmax", "sm_80", examples["softmax"].softmax_f32.specialize()),
        ("attention d=64 causal", "sm_80",
         examples["attention"].attention.specialize(d=64, causal=True)),
    ]
    for M, arch in ((1, "sm_80"), (64, "sm_90a"), (4096, "sm_90a")):
        s = default_schedule(M, 4096, 4096, 128, hopper=arch == "sm_90a", bits=4)
        kwargs = {} if s.dequant else {"wdtype": parse("int4"), "group_size": 128,
                                       "has_zeros": False}
        extra = {"wide_stores": True} if s.wgmma else {}
        programs.append((f"qmm {s}", arch, schedule_kernel(s).specialize(
            **kwargs, **s.constants(), **extra)))
    return [(name, arch, compile_once(p, arch).ptx) for name, arch, p in programs]


CORPUS = None


def ptx_corpus():
    global CORPUS
    if CORPUS is None:
        CORPUS = corpus()
    return CORPUS


def test_random_orders_keep_every_dependency_and_every_line():
    moved = 0
    for name, _, ptx in ptx_corpus():
        order = PtxOrder.parse(ptx)
        assert sum(len(r.instructions) for r in order.runs) > 20, name
        for seed in SEEDS:
            rng = random.Random(seed)
            for run in order.runs:
                new = run.order(rng)
                assert check_order(run, new) == [], name
                moved += new != list(range(len(new)))
            text = order.permuted(random.Random(seed))
            assert Counter(text.splitlines()) == Counter(ptx.splitlines()), name
            assert text == order.permuted(random.Random(seed))  # a seed, one order
    assert moved > 100  # the orders do move instructions


def test_ptxas_accepts_every_reordering():
    try:
        find_ptxas()
    except PtxasNotFoundError:
        pytest.skip("no ptxas on this machine")
    for _, arch, ptx in ptx_corpus():
        for seed in (1, 2):
            check_ptx(PtxOrder.parse(ptx).permuted(random.Random(seed)), arch)


def test_an_order_that_drops_a_dependency_is_caught():
    """Fault injection: the order of a permuter that ignores one RAW edge or one memory
    edge (the last placed just before the first) is caught."""
    caught = Counter()
    for run in (run for _, _, ptx in ptx_corpus() for run in PtxOrder.parse(ptx).runs):
        for a, b in sorted(run.edges):
            inst_a, inst_b = run.instructions[a], run.instructions[b]
            kind = "raw" if inst_a.defines & inst_b.reads else \
                "memory" if inst_a.memory and inst_b.memory else None
            if kind and caught[kind] < 5:
                swapped = list(range(len(run.instructions)))
                swapped.remove(b)
                swapped.insert(swapped.index(a), b)  # b just before a
                assert check_order(run, swapped), (inst_a.text, inst_b.text)
                caught[kind] += 1
    assert caught["raw"] == 5 and caught["memory"] >= 1


SMALL = """.version 8.0
.target sm_80
.address_size 64
.visible .entry k(.param .u64 p)
{
\t.reg .b32 %r<9>;
\t.reg .pred %p<3>;
\tld.param.u64 %rd1, [p];
\tmov.u32 %r1, %tid.x;
\tadd.s32 %r2, %r1, 1;
\tmul.lo.s32 %r3, %r1, 3;
\tsetp.lt.s32 %p1|%p2, %r2, %r3;
\t@%p1 mov.u32 %r1, 7;
\tld.global.u32 %r4, [%rd1];
\tst.global.u32 [%rd1+4], %r2;
\tld.global.u32 %r5, [%rd1+8];
\tbar.sync 0;
\tshl.b32 %r6, %r4, 1;
\tfoo.bar %r7, %r6;
\tadd.s32 %r8, %r6, 2;
$L__BB0_1:
\tret;
}
"""


def test_the_graph_of_a_small_function():
    order = PtxOrder.parse(SMALL)
    first, second, third = order.runs
    texts = [i.text.strip() for i in first.instructions]
    index = {t.split()[0] + " " + t.split()[1]: k for k, t in enumerate(texts)}
    add, mul = index["add.s32 %r2,"], index["mul.lo.s32 %r3,"]
    setp, guarded = index["setp.lt.s32 %p1|%p2,"], index["@%p1 mov.u32"]
    mov, ld1 = index["mov.u32 %r1,"], index["ld.global.u32 %r4,"]
    st, ld2 = index["st.global.u32 [%rd1+4],"], index["ld.global.u32 %r5,"]
    assert first.instructions[setp].defines == {"%p1", "%p2"}
    assert first.instructions[st].defines == set()
    assert first.instructions[st].reads == {"%rd1", "%r2"}
    assert first.instructions[guarded].reads == {"%p1"}
    assert {(mov, add), (mov, mul), (add, setp), (mul, setp), (setp, guarded)} <= first.edges
    assert {(add, guarded), (mul, guarded), (mov, guarded)} <= first.edges  # WAR, WAW
    assert {(ld1, st), (st, ld2), (add, st)} <= first.edges
    assert (ld1, ld2) not in first.edges and (add, mul) not in first.edges
    # bar.sync and the unknown opcode are fences: shl, then add after it, alone
    assert [i.text.strip() for i in second.instructions] == ["shl.b32 %r6, %r4, 1;"]
    assert [i.text.strip() for i in third.instructions] == ["add.s32 %r8, %r6, 2;"]


def test_vmc_tune_permute(tmp_path, capsys):
    source, out = tmp_path / "k.ptx", tmp_path / "k.1.ptx"
    source.write_text(SMALL)
    assert main(["tune", "--permute", str(source), "--seed", "1", "-o", str(out)]) == 0
    assert "movable instructions in 3 runs, seed 1" in capsys.readouterr().err
    assert Counter(out.read_text().splitlines()) == Counter(SMALL.splitlines())
    assert main(["tune", "--permute", str(source), "--seed", "1"]) == 0
    assert capsys.readouterr().out == out.read_text()  # the same seed, the same order
    (tmp_path / "x.ptx").write_text("int main() {}")
    assert main(["tune", "--permute", str(tmp_path / "x.ptx")]) == 2
    assert "no .entry or .func" in capsys.readouterr().err
    assert main(["tune", "--permute", str(tmp_path / "missing.ptx")]) == 2
    assert "cannot read" in capsys.readouterr().err


def test_vmc_tune_takes_a_kernel_or_a_ptx_file(tmp_path, capsys):
    source = tmp_path / "k.ptx"
    source.write_text(SMALL)
    assert main(["tune"]) == 2
    assert "give one of: a kernel to tune (FILE.py[:KERNEL]), --qmm WDTYPE" in \
        capsys.readouterr().err
    assert main(["tune", "examples/vector_add.py", "--permute", str(source)]) == 2
    assert "give one of" in capsys.readouterr().err
    assert main(["tune", "examples/vector_add.py", "--budget", "0"]) == 2
    assert "--budget must be a positive number" in capsys.readouterr().err


def test_vmc_tune_without_a_gpu_says_so(capsys):
    from tilevm.backend import gpu_run
    from tilevm.backend.cuda.errors import NoDriverError

    try:
        gpu_run.gpu_device()
        pytest.skip("a GPU is present")
    except NoDriverError:
        pass
    assert main(["tune", str(ROOT / "examples" / "vector_add.py")]) == 2
    assert "no GPU found" in capsys.readouterr().err


@pytest.mark.parametrize("access", [
    "ld.acquire.gpu.global.u32 %r9, [%rd1];", "st.release.gpu.global.u32 [%rd1], %r2;",
    "atom.acq_rel.gpu.global.add.u32 %r9, [%rd1], 1;", "ld.volatile.global.u32 %r9, [%rd1];",
    "red.relaxed.gpu.global.add.u32 [%rd1], 1;"])
def test_an_access_with_an_ordering_qualifier_is_a_fence(access):
    text = SMALL.replace("\tbar.sync 0;\n", f"\t{access}\n")
    runs = PtxOrder.parse(text).runs
    assert all(access not in i.text for run in runs for i in run.instructions)
    assert len(runs) == 3  # it splits the runs as the barrier did


def test_text_without_a_kernel_is_rejected():
    with pytest.raises(PtxOrderError, match="not a PTX kernel"):
        PtxOrder.parse("hello")


def test_a_stored_order_comes_back_as_the_same_text_and_is_checked():
    """`moved` keeps the runs an order moves; `reordered` rebuilds the same text from
    them, and `ordered_ptx` (the library's reading of a tuning table) applies it only to
    the text it was found on and only if legal, else warns and gives None."""
    name, _, ptx = ptx_corpus()[3]  # a library kernel (the decode qmm)
    order = PtxOrder.parse(ptx)
    orders = [run.order(random.Random(7)) for run in order.runs]
    moved = order.moved(orders)
    assert moved and all(list(o) != sorted(o) for o in moved.values())
    assert order.reordered(moved) == order.text(orders)
    entry = {"of": ptx_digest(ptx), "runs": moved}
    assert ordered_ptx(ptx, entry) == order.text(orders)
    assert ordered_ptx(ptx, {"of": ptx_digest(ptx), "runs": {}}) == ptx
    with pytest.warns(UserWarning, match="another compiled text"):
        assert ordered_ptx(ptx + "\n", entry) is None
    # an order breaking one dependency, one that is not a permutation, a run not there
    index, run = next((i, r) for i, r in enumerate(order.runs) if r.edges)
    a, b = next(iter(run.edges))
    broken = list(range(len(run.instructions)))
    broken[a], broken[b] = broken[b], broken[a]
    for bad, why in (({str(index): broken}, "depends"),
                     ({str(index): [0] * len(run.instructions)}, "not an order"),
                     ({str(len(order.runs)): [0]}, "runs")):
        with pytest.raises(PtxOrderError, match=why):
            order.reordered(bad)
        with pytest.warns(UserWarning, match="not legal"):
            assert ordered_ptx(ptx, {"of": ptx_digest(ptx), "runs": bad}) is None
