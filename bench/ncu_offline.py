"""Offline: the current model's DRAM bytes against the ncu run (device dir argv[1])."""
import csv, json, sys, time
from tilevm.kernels import schedule as sch
from tilevm.kernels import matmul as mm
from tilevm.bench.examples import load_example
from tilevm.cost import hardware
from tilevm.cost.model import Resources, estimate
from tilevm import dtypes

d = sys.argv[1]
rows = [json.loads(l) for l in open(f"{d}/ncu_model.jsonl")]
ncu = {}
for r in csv.DictReader(open(f"{d}/ncu.csv")):
    e = ncu.setdefault(int(r["ID"]), {"name": r["Kernel Name"], "grid": r["Grid Size"]})
    e[r["Metric Name"]] = float(r["Metric Value"].replace(",", ""))
ids = sorted(ncu)
import dataclasses, os
gpu = hardware.gpu("h100")
if os.environ.get("L2MB"): gpu = dataclasses.replace(gpu, l2_bytes=int(float(os.environ["L2MB"]) * 2**20))
class QW: pass
out = []
i = 0
for r in rows:
    progs = []
    if "example" in r:
        mod = load_example("matmul" if r["example"] == "matmul" else "attention")
        k = mod.matmul if r["example"] == "matmul" else mod.attention
        p = k.specialize(**r["constants"])
        if r["example"] == "matmul":
            args = {"M": 4096, "N": 4096, "K": 4096}
        else:
            S, BH = (int(t.split("=")[1]) for t in r["example"].split()[1:])
            args = {"S": S, "BH": BH}
        progs = [(p, args)]
        label = r["example"] + (" causal" if r["constants"].get("causal") else "")
    else:
        N, K, M = r["N"], r["K"], r["M"]
        s = {str(c): c for c in sch.candidates(M, N, K, 128, hopper=True, bits=dtypes.parse(r["wdtype"]).bits)}
        s = s.get(r["schedule"]) or sch.default_schedule(M, N, K, 128, hopper=True, bits=dtypes.parse(r["wdtype"]).bits)
        assert str(s) == r["schedule"], (str(s), r["schedule"])
        qw = QW(); qw.dtype = dtypes.parse(r["wdtype"]); qw.group_size = 128; qw.zeros = None
        qw.scale_dtype = dtypes.parse("f16")
        ps = [mm._program(qw, s, N)]
        if s.dequant:
            ps.insert(0, mm._dequantizer_program(qw))
        progs = [(p, {k: v for k, v in {"M": M, "N": N, "K": K}.items() if k in {q.name for q in p.params}}) for p in ps]
        label = f"{r['wdtype']} N={N} K={K} M={M}"
    for (p, args), res in zip(progs, r["kernels"]):
        t0 = time.time()
        e = estimate(p, args, gpu, Resources(res["threads"], res["regs"], res["shared"]))
        m = ncu[ids[i]]; i += 1
        meas = m["dram__bytes_read.sum"] + m["dram__bytes_write.sum"]
        out.append({"label": label, "kernel": m["name"], "grid": m["grid"],
                    "schedule": r.get("schedule", json.dumps(r.get("constants"))),
                    "ncu_read": m["dram__bytes_read.sum"], "ncu_write": m["dram__bytes_write.sum"],
                    "ncu_us": m["gpu__time_duration.sum"] / 1e3, "model_dram": e.traffic.dram,
                    "ratio": e.traffic.dram / meas, "predicted_us": e.predicted_s * 1e6,
                    "analysis_s": time.time() - t0})
        print(f"{label:32s} {m['name']:22s} ncu {meas/1e6:9.1f} MB model {e.traffic.dram/1e6:9.1f} MB ratio {e.traffic.dram/meas:5.2f}  t {m['gpu__time_duration.sum']/1e3:8.1f} us pred {e.predicted_s*1e6:8.1f}  ({time.time()-t0:.1f}s)", flush=True)
json.dump(out, open(sys.argv[2], "w"), indent=1)
