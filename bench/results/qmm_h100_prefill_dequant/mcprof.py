"""mcprof.py OUT: one launch each of wt_matmul and its cluster patch (cluster_mcast.py's
`patch`, as it stood for that run: release/acquire cluster barriers) on 8B qkv, M = 4096,
between cudaProfilerStart/Stop (mcprof.sh runs ncu on it)."""
# ruff: noqa: E501
import dataclasses
import re
import sys

import torch

from tilevm.backend import runtime
from tilevm.backend.launch import build_artifact, compiled_kernel
from tilevm.bench.qmm import SHAPES
from tilevm.kernels.qmm_dequant import wt_matmul_kernel

CLUSTER_BAR = "barrier.cluster.arrive.aligned;\n\tbarrier.cluster.wait.aligned;"


def patch(ptx: str, split: bool) -> str:
    """split=False: every barrier a full cluster barrier. split=True: the block barriers
    stay; each thread arrives at the cluster barrier once its wgmmas of the k-tile before
    are retired (after `wait_group 1`) and waits for the peer's arrival at the next
    k-tile's start, before the block barrier (a whole k-tile later)."""
    assert ".maxntid 256" in ptx
    ptx = ptx.replace(".maxntid 256", ".maxntid 256\n.reqnctapercluster 2, 1, 1", 1)
    bars = [m.start() for m in re.finditer(r"bar\.sync \t0;", ptx)]
    assert len(bars) == 5, len(bars)
    if split:
        first = bars[0]
        ptx = ptx[:first] + CLUSTER_BAR + "\n\tbarrier.cluster.arrive.release.aligned;" + \
            ptx[first + len("bar.sync \t0;"):]
        ptx = ptx.replace("fence.proxy.async.shared::cta;\n\t// end inline asm\n\tbar.sync \t0;",
                          "fence.proxy.async.shared::cta;\n\t// end inline asm\n\t"
                          "barrier.cluster.wait.acquire.aligned;\n\tbar.sync \t0;")
        assert ptx.count("barrier.cluster.wait.acquire.aligned") == 4
        ptx = ptx.replace("wgmma.wait_group.sync.aligned 1;",
                          "wgmma.wait_group.sync.aligned 1;\n\tbarrier.cluster.arrive.release.aligned;")
        assert ptx.count("barrier.cluster.arrive.release.aligned") == 5
        ptx = re.sub(r"\n(\s*)ret;", r"\n\1barrier.cluster.wait.acquire.aligned;\n\1ret;", ptx)
    else:
        ptx = re.sub(r"bar\.sync \t0;", CLUSTER_BAR, ptx)
        ptx = re.sub(r"\n(\s*)ret;", r"\n\1" + CLUSTER_BAR.replace("\n\t", "\n\\1") + r"\n\1ret;", ptx)
    lines = ptx.split("\n")
    out, last_tx, n = [], None, 0
    for line in lines:
        m = re.search(r"mbarrier\.expect_tx\.relaxed\.cta\.shared::cta\.b64 \[%r\d+\], (%r\d+);", line)
        if m:
            last_tx = m.group(1)
        c = re.match(r"(\s*)cp\.async\.bulk\.tensor\.2d\.shared::cluster\.global\.tile\.mbarrier::complete_tx::bytes (\[.*\]), (\[.*\]), (\[.*\]);", line)
        if c and last_tx is not None and last_tx_bytes.get(last_tx) == 16384:
            ind, dst, src, bar = c.groups()
            out.append(f"{ind}{{ .reg .pred %mc_p; .reg .b32 %mc_r; .reg .b16 %mc_m;")
            out.append(f"{ind}mov.u32 %mc_r, %cluster_ctarank; setp.eq.u32 %mc_p, %mc_r, 0; mov.b16 %mc_m, 3;")
            out.append(f"{ind}@%mc_p cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes.multicast::cluster {dst}, {src}, {bar}, %mc_m; }}")
            n += 1
            continue
        out.append(line)
    assert n >= 3, n
    return "\n".join(out)


last_tx_bytes = {}


def scan_tx(ptx):
    for m in re.finditer(r"mov\.b32 \t(%r\d+), (\d+);", ptx):
        last_tx_bytes[m.group(1)] = int(m.group(2))


program = wt_matmul_kernel("f16").specialize()
art = build_artifact(program, "sm_90a")
scan_tx(art.ptx)
ptx2 = patch(art.ptx, False)
ptx3 = patch(art.ptx, True)
open(sys.argv[1] + "/wt_matmul_cluster.ptx", "w").write(ptx2)
open(sys.argv[1] + "/wt_matmul_cluster_split.ptx", "w").write(ptx3)
mc = runtime.load_artifact(dataclasses.replace(art, ptx=ptx2))

base = compiled_kernel(program)

N, K = SHAPES["8b.qkv"]
M = 4096
x = torch.randn(M, K, device="cuda", dtype=torch.float16)
wt = torch.randn(N, K, device="cuda", dtype=torch.float16)
y = torch.empty(M, N, device="cuda", dtype=torch.float16)
for k in (base, mc):
    k(x, wt, y, M, N, K)
torch.cuda.synchronize()
torch.cuda.profiler.start()
base(x, wt, y, M, N, K)
mc(x, wt, y, M, N, K)
torch.cuda.synchronize()
torch.cuda.profiler.stop()
