"""Experiment (issue 46): reordered PTX against the compiled kernel on the GPU, 20 example
kernels x 1,000 random inputs (4 orders per kernel, 250 inputs each), bitwise; then
fault injection: an order that drops one RAW edge, and a shared load moved above the
bar.sync before it. One JSON line per kernel / fault."""
import copy, json, random, sys, time
import numpy as np
from tilevm import dtypes
from tilevm.bench.examples import load_example
from tilevm.backend.launch import compiled_kernel, copy_back, to_device
from tilevm.tune.ptx_order import PtxOrder, Run
from tilevm.tune.variants import compiled_ptx, ptx_variant

INPUTS = int(sys.argv[1]) if len(sys.argv) > 1 else 1000
CORPUS = [
    *[("matmul", "matmul", {"bm": bm, "bn": bn, "bk": 32}) for bm, bn in ((32, 32), (64, 64), (16, 64))],
    *[("attention", "attention", {"d": d, "causal": causal, "block_q": bq, "block_kv": 64, "num_warps": w})
      for d in (64, 128) for causal in (False, True) for bq, w in ((64, 4), (128, 8))],
    ("softmax", "softmax_f32", {}), ("vector_add", "vector_add", {}),
    *[("quantized_matmul", "quantized_matmul", {"wdtype": dtypes.parse(t)})
      for t in ("int4", "int3", "f6e3m2", "int8", "uint2", "f4e2m1")],
]


def outputs(module, kernel, settings, loaded, rng_state):
    rng = np.random.default_rng(rng_state)
    args, constants = module.example_inputs(rng, **copy.deepcopy(settings))
    program = kernel.specialize(**constants)
    device_args, copies = to_device(program, args)
    loaded(*device_args)
    copy_back(copies)
    return [host.view(np.uint8).copy() for host, _ in copies]


def text_with(order, run, sequence):
    out = []
    for piece in order.pieces:
        if isinstance(piece, str):
            out.append(piece)
        else:
            idx = sequence if piece is run else range(len(piece.instructions))
            out.extend(piece.instructions[i].text for i in idx)
    return "".join(out)


total = 0
for example, name, settings in CORPUS:
    t0 = time.time()
    module = load_example(example); kernel = getattr(module, name)
    _, constants = module.example_inputs(np.random.default_rng(0), **copy.deepcopy(settings))
    program = kernel.specialize(**constants)
    ptx = compiled_ptx(program)
    order = PtxOrder.parse(ptx)
    texts = [order.permuted(random.Random(s)) for s in range(1, 5)]
    variants = [ptx_variant(program, t) for t in texts]
    original = compiled_kernel(program)
    failures = 0
    for i in range(INPUTS):
        a = outputs(module, kernel, settings, original, 1000 + i)
        b = outputs(module, kernel, settings, variants[i % 4], 1000 + i)
        failures += not all(np.array_equal(x, y) for x, y in zip(a, b))
    total += INPUTS
    print(json.dumps({"kernel": f"{example}:{name} {settings}", "inputs": INPUTS, "orders": 4,
                      "distinct_orders": len(set(texts)), "differs_from_compiled": sum(t != ptx for t in texts),
                      "movable": sum(len(r.instructions) for r in order.runs), "runs": len(order.runs),
                      "failures": failures, "seconds": round(time.time() - t0, 1)}, default=str), flush=True)

# fault injection on the attention kernel (d=64, 64x64, 4 warps)
module = load_example("attention"); kernel = module.attention
settings = {"d": 64, "causal": False, "block_q": 64, "block_kv": 64, "num_warps": 4}
_, constants = module.example_inputs(np.random.default_rng(0), **copy.deepcopy(settings))
program = kernel.specialize(**constants)
ptx = compiled_ptx(program); order = PtxOrder.parse(ptx); original = compiled_kernel(program)
faults = []
# (1) one RAW edge dropped: in the longest run, a use placed just before its definition
run = max(order.runs, key=lambda r: len(r.instructions))
for a, b in sorted(run.edges):
    ia, ib = run.instructions[a], run.instructions[b]
    if ia.defines & ib.reads and not ia.memory and b > a:
        seq = list(range(len(run.instructions))); seq.remove(b); seq.insert(seq.index(a), b)
        faults.append(("raw edge dropped: " + ib.text.strip() + " before " + ia.text.strip(), text_with(order, run, seq)))
        break
# (2) a shared load moved above the bar.sync before it
lines = ptx.splitlines(keepends=True)
for k, line in enumerate(lines):
    if line.strip().startswith("bar.sync"):
        for m in range(k + 1, min(k + 40, len(lines))):
            if lines[m].strip().startswith(("ld.shared", "ldmatrix")):
                moved = lines[:k] + [lines[m]] + lines[k:m] + lines[m + 1:]
                faults.append(("load above bar.sync: " + lines[m].strip(), "".join(moved)))
                break
        if len(faults) >= 3:
            break
for what, text in faults:
    try:
        bad = ptx_variant(program, text)
    except Exception as e:  # noqa
        print(json.dumps({"fault": what, "rejected_by_loader": str(e)[:200]}), flush=True); continue
    caught = 0
    for i in range(50):
        a = outputs(module, kernel, settings, original, 5000 + i)
        b = outputs(module, kernel, settings, bad, 5000 + i)
        caught += not all(np.array_equal(x, y) for x, y in zip(a, b))
    print(json.dumps({"fault": what, "inputs": 50, "caught": caught}), flush=True)
