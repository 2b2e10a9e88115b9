"""What the quantized matmul benchmark writes: the summary table it prints last (one row
per backend, shape, weight and activation type; one column per M), qmm.md (the run's
environment, ceilings, the summary and every result row), qmm.json (strict JSON) and
qmm.png (fraction of the roofline against M; skipped, and said so, without matplotlib)."""

from __future__ import annotations

import json
import math
import os
from typing import Any

import numpy as np


def _fmt(value: Any, spec: str) -> str:
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return "-"
    return format(value, spec)


def _cell(result: dict) -> str:
    """One pivot-table cell: speedup over cuBLAS (same activation) and roofline fraction."""
    status = result.get("status")
    if status == "ok":
        speed = result.get("speedup_vs_cublas")
        speed_text = f"{speed:.2f}x" if speed is not None else "?x"
        return f"{speed_text} {100 * result['roofline_fraction']:.0f}%"
    return {"fail": "FAIL", "error": "ERR"}.get(status, "-")


def format_summary(results: list[dict], ceilings: dict | None = None) -> str:
    """The short table printed last: one row per (backend, shape, weight type,
    activation, method), one column per M; each cell `speedup over cuBLAS (timed the same
    way), % of roofline` (FAIL: wrong result, ERR: the kernel raised, -: skipped)."""
    ms = sorted({r["M"] for r in results})
    rows: dict[tuple, dict[int, dict]] = {}
    for r in results:
        key = (r["backend"], r["shape"], r["wdtype"], r["act"], r.get("method", "isolated"))
        rows.setdefault(key, {})[r["M"]] = r
    lines = []
    if ceilings:
        lines.append(f"ceilings: copy {ceilings['copy_bw_bytes_per_s'] / 1e12:.2f} TB/s, "
                     f"cuBLAS f16 {ceilings['cublas_f16_tflops']:.0f} TFLOP/s at 8192^3")
    lines.append("cell: speedup over cuBLAS (same shape, activation type), % of roofline")
    head = f"{'backend':<8} {'shape':<12} {'weights':<7} {'act':<4} {'method':<8}" + \
        "".join(f" {'M=' + str(m):>12}" for m in ms)
    lines += [head, "-" * len(head)]
    for (backend, shape, wdtype, act, method), by_m in rows.items():
        cells = "".join(f" {(_cell(by_m[m]) if m in by_m else ''):>12}" for m in ms)
        lines.append(f"{backend:<8} {shape:<12} {wdtype:<7} {act:<4} {method:<8}{cells}")
    counts = {s: sum(r["status"] == s for r in results) for s in ("ok", "fail", "error", "skip")}
    lines.append(", ".join(f"{n} {s}" for s, n in counts.items()))
    return "\n".join(lines)


MD_COLUMNS = [("backend", "backend", "s"), ("shape", "shape", "s"), ("N", "N", "d"),
              ("K", "K", "d"), ("M", "M", "d"), ("weights", "wdtype", "s"),
              ("act", "act", "s"), ("method", "method", "s"), ("check", "check", "s"),
              ("max err", "max_err", ".2e"),
              ("us", "us", ".1f"), ("TB/s", "tbps", ".2f"), ("TFLOP/s", "tflops", ".1f"),
              ("x cuBLAS f16", "speedup_vs_cublas_f16", ".2f"),
              ("x cuBLAS bf16", "speedup_vs_cublas_bf16", ".2f"),
              ("roofline", "roofline_fraction", ".1%"),
              ("of read floor", "floor_fraction", ".1%"),
              ("floor's roofline", "attainable_roofline", ".1%"), ("note", "reason", "s")]


def format_markdown(report: dict) -> str:
    """qmm.md: the run's ceilings, the summary table and every result row."""
    out = [f"# Quantized matmul benchmark ({report.get('date', '')})", ""]
    if report.get("status") == "skipped":
        return "\n".join(out + [f"Skipped: {report.get('reason')}", ""])
    env = report.get("environment", {})
    if env:
        out += [f"GPU: {env.get('gpu')}; driver {env.get('driver')}; torch "
                f"{env.get('torch')}; triton {env.get('triton')}; timing: "
                f"{report.get('timing', {}).get('method')}", ""]
    ceilings = report.get("ceilings")
    if ceilings:
        out += [f"Ceilings: device copy {ceilings['copy_bw_bytes_per_s'] / 1e12:.2f} TB/s "
                f"(read + written), cuBLAS f16 8192^3 {ceilings['cublas_f16_tflops']:.0f} "
                f"TFLOP/s.", ""]
    parts = report.get("parts", [])
    if len(parts) > 1:  # (a resumed run: `bench.resume`)
        out += [f"Measured in {len(parts)} parts: " + "; ".join(
            f"{p.get('date')} at {p.get('tilevm_commit')}, {p.get('configurations')} "
            f"configurations" for p in parts) + ".", ""]
    results = report.get("results", [])
    out += ["```", format_summary(results), "```", ""]
    out.append("| " + " | ".join(title for title, _, _ in MD_COLUMNS) + " |")
    out.append("|" + "|".join("---" for _ in MD_COLUMNS) + "|")
    for r in results:
        row = dict(r)
        row["check"] = {True: "pass", False: "FAIL", None: "-"}[r.get("check_passed")]
        row["max_err"] = r.get("max_rel_err")
        cells = []
        for _, key, spec in MD_COLUMNS:
            value = row.get(key)
            text = _fmt(value, spec) if spec != "s" else ("-" if value is None else str(value))
            cells.append(text.replace("|", "\\|"))
        out.append("| " + " | ".join(cells) + " |")
    compile_rows = report.get("compile", [])
    if compile_rows:
        out += ["", "Compile time of each tilevm variant (s):", "",
                "| weights | group | cold | cached | via |", "|---|---|---|---|---|"]
        out += [f"| {c['wdtype']} | {c['group_size']} | {_fmt(c.get('cold_s'), '.3f')} | "
                f"{_fmt(c.get('cached_s'), '.3f')} | {c.get('via', '')} |" for c in compile_rows]
    return "\n".join(out) + "\n"


def jsonable(value: Any) -> Any:
    """`value` with non-finite floats as None (JSON has no NaN) and tuples as lists."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [jsonable(v) for v in value]
    if isinstance(value, np.generic):
        return jsonable(value.item())
    return value


def plot(report: dict, path: str) -> str | None:
    """qmm.png: fraction of roofline against M, one line per weight type (and cuBLAS),
    one panel per (shape, activation), tilevm solid, gemlite dashed, Humming dash-dotted;
    graph-method times where the run has them. Returns why it was skipped, or None."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except Exception as err:
        return f"matplotlib unavailable: {type(err).__name__}: {err}"
    ok = [r for r in report["results"] if r["status"] == "ok"]
    methods = {r.get("method", "isolated") for r in ok}
    headline = "graph" if "graph" in methods else "isolated"
    ok = [r for r in ok if r.get("method", "isolated") == headline]
    panels = list(dict.fromkeys((r["shape"], r["act"]) for r in ok))
    if not panels:
        return "no timed results to plot"
    cols = min(3, len(panels))
    rows = -(-len(panels) // cols)
    fig, axes = plt.subplots(rows, cols, figsize=(6 * cols, 4.2 * rows), squeeze=False)
    styles = {"tilevm": "-", "gemlite": "--", "humming": "-.", "cublas": ":"}
    for ax, (shape, act) in zip(axes.flat, panels):
        lines: dict[tuple[str, str], list[tuple[int, float]]] = {}
        for r in ok:
            if (r["shape"], r["act"]) == (shape, act):
                lines.setdefault((r["backend"], r["wdtype"]), []).append(
                    (r["M"], r["roofline_fraction"]))
        for (backend, wdtype), points in lines.items():
            points.sort()
            label = wdtype if backend == "tilevm" else f"{backend} {wdtype}"
            ax.plot([p[0] for p in points], [p[1] for p in points], styles[backend],
                    marker="o", markersize=3, label=label,
                    color="black" if backend == "cublas" else None)
        ax.set_xscale("log", base=2)
        top = max([1.0] + [f for points in lines.values() for _, f in points])
        ax.set_ylim(0, 1.05 * top)  # a kernel can beat the run's measured ceilings
        ax.set_title(f"{shape} ({act} activations)")
        ax.set_xlabel("M")
        ax.set_ylabel("fraction of roofline")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=6, ncol=2)
    for ax in list(axes.flat)[len(panels):]:
        ax.axis("off")
    fig.suptitle(f"quantized matmul, {report['environment']['gpu']} ({headline} method)")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return None


def write_outputs(report: dict, out: str) -> None:
    """qmm.json, qmm.md (and qmm.png when there is something to plot) in `out`."""
    os.makedirs(out, exist_ok=True)
    skipped = plot(report, os.path.join(out, "qmm.png")) if report.get("results") else \
        "nothing was timed"
    report["plot"] = {"file": "qmm.png"} if skipped is None else {"skipped": skipped}
    with open(os.path.join(out, "qmm.md"), "w") as f:
        f.write(format_markdown(report))
    with open(os.path.join(out, "qmm.json"), "w") as f:
        json.dump(jsonable(report), f, indent=1)
