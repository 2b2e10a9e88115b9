# ruff: noqa  (an offline experiment, issue 45: the mma.sync rate)
"""Offline: the cost model's ranking of measured quantized-matmul candidates (H100, int4
g128 f16) with dots whose b is in registers (mma.sync) at `f * tensor_peak`, f swept.

Adapted from bench/exp_rank_mid_offline.py (d5cbe34), without the exchange term.
Sets: the M = 64/256 candidates (qmm_mid_pair_candidates_h100_987aebd.jsonl: rows whose
schedule is a current candidate of its problem, matched by str()), and the earlier
measured sets (cost_rank_h100_629fb23.jsonl, cost_rank_h100_9d3827b.jsonl,
cost_rank_prefill_h100_76cb6b3.jsonl: a row's schedule is the current candidate of that
str() if there is one, else rebuilt from the string's fields; skipped if that fails).
Resources: ptxas's registers of the current code (local ptxas), the artifact's shared
bytes, cached in /tmp/rank_resources.json. A dequant schedule is its two launches'
predictions summed (as tune.rank does).

    PYTHONPATH=<dir with tilevm> python bench/exp_rank_mma_sync.py [fractions...]
"""
import collections
import dataclasses
import json
import os
import sys
from concurrent.futures import ProcessPoolExecutor
from types import SimpleNamespace

from tilevm import dtypes
from tilevm.backend import ptxas
from tilevm.backend.launch import build_artifact
from tilevm.cost.hardware import GPUS
from tilevm.cost.model import Resources, estimate
from tilevm.kernels.matmul_launch import dequantizer_program, schedule_program
from tilevm.kernels.schedule import Schedule
from tilevm.kernels.tilings import candidates

RESULTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "results")
RESULTS = os.environ.get("RANK_RESULTS", RESULTS)
MID = "qmm_mid_pair_candidates_h100_987aebd.jsonl"
OTHERS = ("cost_rank_h100_629fb23.jsonl", "cost_rank_h100_9d3827b.jsonl",
          "cost_rank_prefill_h100_76cb6b3.jsonl")
CACHE = "/tmp/rank_resources.json"
QW = SimpleNamespace(dtype=dtypes.parse("int4"), group_size=128, zeros=None,
                     scale_dtype=dtypes.parse("f16"))
DEQUANT = "<dequantize>"


def parse(name):
    """A Schedule from its str() (the fields it prints)."""
    t = name.split()
    kw, i = {}, 0
    if t[0] == "wgmma":
        kw["wgmma"], i = True, 1
        if t[1] in ("shared_weights", "half_atoms", "dequant"):
            kw[t[1]], i = True, 2
    elif t[0] == "staged":
        kw["staged"], i = True, 1
    for tok in t[i:]:
        if "=" in tok:
            k, v = tok.split("=")
            kw["num_warps" if k == "warps" else k] = int(v)
        elif tok == "x_global":
            kw["x_shared"] = False
        else:
            kw[tok] = True
    s = Schedule(**kw)
    assert str(s) == name, (str(s), name)
    return s


def launches(s, N):
    """The programs one call with schedule `s` launches (name for resources, program)."""
    main = (str(s), schedule_program(QW, s, N))
    return [(DEQUANT, dequantizer_program(QW)), main] if s.dequant else [main]


def compile_one(job):
    name, N = job
    try:
        s = parse(name) if name != DEQUANT else None
        program = dequantizer_program(QW) if s is None else schedule_program(QW, s, N)
        a = build_artifact(program, "sm_90a")
        regs = ptxas.check_ptx(a.ptx, "sm_90a").kernels[a.kernel_name].registers
        threads = a.num_threads
        return name, [threads, regs, a.shared_bytes]
    except Exception as err:  # a schedule the current code no longer builds
        return name, f"error: {type(err).__name__}: {err}"[:300]


def load():
    """Every set's rows: dict(set, N, K, M, name, us, schedule (or None), why)."""
    out = []
    for f in (MID, *OTHERS):
        for line in open(os.path.join(RESULTS, f)):
            r = json.loads(line)
            M, N, K = r["M"], r["N"], r["K"]
            cur = {str(c): c for c in candidates(M, N, K, 128, hopper=True, bits=4)}
            name = r["schedule"]
            row = dict(set=f, M=M, N=N, K=K, name=name, us=r.get("us", r.get("measured_us")),
                       current=name in cur, schedule=cur.get(name), why=None)
            if row["schedule"] is None and f != MID:
                try:
                    row["schedule"] = parse(name)
                except Exception as err:
                    row["why"] = f"parse: {err}"
            out.append(row)
    return out


def resources(rows):
    cache = json.load(open(CACHE)) if os.path.exists(CACHE) else {}
    jobs = {}
    for r in rows:
        if r["schedule"] is None:
            continue
        for name, _ in ([(DEQUANT, None)] if r["schedule"].dequant else []) + [(r["name"], None)]:
            if name not in cache:
                jobs[name] = (name, r["N"])
    if jobs:
        with ProcessPoolExecutor(8) as ex:
            for name, res in ex.map(compile_one, jobs.values()):
                cache[name] = res
        json.dump(cache, open(CACHE, "w"), indent=0, sort_keys=True)
    return cache


def threads_of(s, name):
    return 128 if name == DEQUANT else 32 * s.num_warps


def predict(job):
    """(key, {fraction: predicted us}, has mma_sync flops)."""
    key, s, M, N, K, res, fractions = job
    out = {f: 0.0 for f in fractions}
    mma = False
    for name, program in launches(s, N):
        threads, regs, shared = res[name]
        R = Resources(threads or threads_of(s, name), regs, shared)
        names = {p.name for p in program.params}
        sc = {k: v for k, v in {"M": M, "N": N, "K": K}.items() if k in names}
        e = estimate(program, sc, GPUS["h100"], R)
        if e.traffic.flops.get("mma_sync", 0):
            mma = True
            for f in fractions:
                g = dataclasses.replace(GPUS["h100"], mma_sync_fraction=f)
                out[f] += estimate(program, sc, g, R).predicted_s * 1e6
        else:
            for f in fractions:
                out[f] += e.predicted_s * 1e6
    return key, out, mma


def rank(v):
    order = sorted(range(len(v)), key=lambda i: v[i])
    out = [0] * len(v)
    for k, i in enumerate(order):
        out[i] = k
    return out


def spearman(a, b):
    n = len(a)
    ra, rb = rank(a), rank(b)
    return 1 - 6 * sum((x - y) ** 2 for x, y in zip(ra, rb)) / (n * (n * n - 1))


def evaluate(rows, f, verbose):
    groups = collections.defaultdict(list)
    for r in rows:
        groups[(r["N"], r["K"], r["M"])].append(r)
    rhos, top3, best10, per = [], 0, 0, {}
    for k in sorted(groups, key=lambda k: (k[2], k[0], k[1])):
        v = groups[k]
        m = [r["us"] for r in v]
        p = [r["pred"][f] for r in v]
        order = sorted(range(len(v)), key=lambda i: p[i])
        third = order[:max(1, -(-len(v) // 3))]
        best = min(m)
        t3 = min(m[i] for i in third) / best
        b = m[order[0]] / best
        rho = spearman(m, p) if len(v) > 1 else float("nan")
        rhos.append(rho)
        top3 += t3 <= 1.03
        best10 += b <= 1.10
        per[k] = (rho, t3, b, v[order[0]]["name"])
        if verbose:
            print(f"  {k} n={len(v)} rho {rho:.2f} top-third {t3:.3f} predicted best {b:.2f}"
                  f" ({v[order[0]]['name']}; measured best {v[m.index(best)]['name']})")
    good = [x for x in rhos if x == x]
    return dict(rho=sum(good) / len(good), top3=top3, best10=best10, problems=len(groups),
                rows=len(rows)), per


def main():
    fractions = [float(x) for x in sys.argv[1:]] or [1.0, 0.8, 0.7, 0.6, 0.5]
    rows = load()
    res = resources(rows)
    used, skipped = [], collections.Counter()
    for r in rows:
        if r["set"] == MID and not r["current"]:
            skipped[(r["set"], "not a current candidate")] += 1
        elif r["schedule"] is None:
            skipped[(r["set"], "unparsed")] += 1
        elif any(not isinstance(res.get(n), list) for n, _ in
                 ([(DEQUANT, 0)] if r["schedule"].dequant else []) + [(r["name"], 0)]):
            skipped[(r["set"], "does not compile")] += 1
        else:
            used.append(r)
    jobs = [(i, r["schedule"], r["M"], r["N"], r["K"], res, fractions) for i, r in enumerate(used)]
    with ProcessPoolExecutor(8) as ex:
        for i, out, mma in ex.map(predict, jobs, chunksize=2):
            used[i]["pred"], used[i]["mma"] = out, mma
    print("skipped:", dict(skipped))
    for f in (MID, *OTHERS):
        n = collections.Counter((r["N"], r["K"], r["M"]) for r in used if r["set"] == f)
        tot = collections.Counter((r["N"], r["K"], r["M"]) for r in rows if r["set"] == f)
        print(f"{f}: rows used per problem", {k: f"{n[k]}/{tot[k]}" for k in sorted(tot, key=lambda k: (k[2], k[0], k[1]))},
              "rebuilt from fields:", sum(1 for r in used if r["set"] == f and not r["current"]),
              "with mma.sync dots:", sum(1 for r in used if r["set"] == f and r["mma"]))
    table, pers = {}, {}
    for f in fractions:
        for s in (MID, *OTHERS):
            verbose = os.environ.get("VERBOSE") == "1" or (s == MID and f in (fractions[0],))
            if verbose:
                print(f"fraction {f} {s}")
            table[(f, s)], pers[(f, s)] = evaluate([r for r in used if r["set"] == s], f, verbose)
    print("\nfraction  set                                     mean rho  top3<=3%  best<=10%  problems  rows")
    for f in fractions:
        for s in (MID, *OTHERS):
            t = table[(f, s)]
            print(f"{f:<9} {s:<40} {t['rho']:8.3f} {t['top3']:>6}/{t['problems']:<3} {t['best10']:>6}/{t['problems']:<3}"
                  f" {t['problems']:>7} {t['rows']:>5}")
    print("\nflips against fraction", fractions[0], "(problem: predicted best ratio, top-third ratio, pick)")
    for f in fractions[1:]:
        for s in (MID, *OTHERS):
            for k, (rho, t3, b, pick) in pers[(f, s)].items():
                rho0, t30, b0, pick0 = pers[(fractions[0], s)][k]
                if (b <= 1.10) != (b0 <= 1.10) or (t3 <= 1.03) != (t30 <= 1.03) or pick != pick0:
                    print(f"  f={f} {s[:24]} {k}: best {b0:.2f}->{b:.2f} top3 {t30:.3f}->{t3:.3f}"
                          f" rho {rho0:.2f}->{rho:.2f} pick {pick0!r} -> {pick!r}")
    json.dump([{k: r[k] for k in ("set", "N", "K", "M", "name", "us", "pred", "mma")} for r in used],
              open("/tmp/rank_mma_sync_preds.json", "w"))


if __name__ == "__main__":
    main()
