"""Run NVIDIA's `ptxas` on PTX text: accept or reject it, and report each kernel's resources.

    from tilevm.backend.ptxas import check_ptx
    report = check_ptx(ptx_text, arch="sm_90")
    report["my_kernel"].registers, report.spill_bytes, print(report)

`check_ptx` assembles the text with `ptxas -v --gpu-name ARCH` (the machine code is
thrown away) and parses ptxas' resource lines into a `ResourceReport`: per entry kernel
the registers, spill stores/loads (bytes), static shared memory, stack frame, barriers
and constant bank 0; device functions (`.func` that were not inlined) get their stack
frame and spills too. PTX that ptxas rejects raises `PTXError`, whose message is
ptxas' first error lines with each cited PTX line quoted.

Which ptxas (`find_ptxas`), first found wins:
1. the `TILEVM_PTXAS` environment variable (a path to the executable; it must exist);
2. `ptxas` on `PATH`;
3. `$CUDA_HOME/bin`, `$CUDA_PATH/bin`, `/usr/local/cuda/bin`;
4. the `nvidia-cuda-nvcc` wheel in any `sys.path` entry (`nvidia/cu13/bin/ptxas` for
   CUDA 13, `nvidia/cuda_nvcc/bin/ptxas` for CUDA 12, or any `nvidia/*/bin/ptxas`).
None found: `PtxasNotFoundError`, saying how to get one.
"""

from __future__ import annotations

import functools
import glob
import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field

__all__ = [
    "SUPPORTED_ARCHS", "KernelResources", "ResourceReport", "PTXError", "PtxasNotFoundError",
    "check_ptx", "assemble", "disassemble", "DisassemblyError", "find_ptxas",
    "find_cuda_tool", "CudaToolNotFoundError", "ptxas_version", "parse_report",
    "annotate_log",
]

SUPPORTED_ARCHS = ("sm_80", "sm_86", "sm_89", "sm_90", "sm_90a")

_EXE = "ptxas.exe" if sys.platform == "win32" else "ptxas"
_ERROR_LINES = 10  # how many of ptxas' error lines a PTXError message shows


class PTXError(Exception):
    """ptxas rejected the PTX. `log` is ptxas' whole output, `errors` its error lines,
    `arch` the target; `str()` shows the first errors with each cited PTX line quoted."""

    def __init__(self, message: str, log: str = "", errors: Sequence[str] = (),
                 arch: str | None = None) -> None:
        super().__init__(message)
        self.log = log
        self.errors = tuple(errors)
        self.arch = arch


class PtxasNotFoundError(FileNotFoundError):
    """No ptxas executable could be found."""


@dataclass(frozen=True)
class KernelResources:
    """What ptxas reports for one function. Sizes are bytes; `registers` per thread."""

    name: str
    entry: bool = True
    registers: int = 0
    spill_stores: int = 0
    spill_loads: int = 0
    stack_frame: int = 0
    shared_bytes: int = 0  # static shared memory (dynamic shared memory is not counted)
    barriers: int = 0
    cmem0: int = 0  # constant bank 0 (kernel parameters and driver data)

    @property
    def spill_bytes(self) -> int:
        return self.spill_stores + self.spill_loads

    def __str__(self) -> str:
        kind = "kernel" if self.entry else "function"
        return (f"{kind} {self.name}: {self.registers} registers, "
                f"{self.spill_stores} bytes spill stores, {self.spill_loads} bytes spill loads, "
                f"{self.stack_frame} bytes stack frame, {self.shared_bytes} bytes smem")


@dataclass(frozen=True)
class ResourceReport:
    """ptxas' resource report for one PTX module on one architecture.

    `kernels` maps each entry kernel's name to its `KernelResources`; `functions` does the
    same for device functions that were not inlined. `report[name]` looks up either.
    """

    arch: str
    kernels: dict[str, KernelResources] = field(default_factory=dict)
    functions: dict[str, KernelResources] = field(default_factory=dict)
    warnings: tuple[str, ...] = ()
    log: str = ""
    ptxas: str = ""  # the executable that produced it

    def __getitem__(self, name: str) -> KernelResources:
        if name in self.kernels:
            return self.kernels[name]
        if name in self.functions:
            return self.functions[name]
        known = ", ".join([*self.kernels, *self.functions]) or "none"
        raise KeyError(f"no kernel or function {name!r} in the ptxas report (known: {known})")

    def __iter__(self) -> Iterator[KernelResources]:
        return iter(self.kernels.values())

    def __len__(self) -> int:
        return len(self.kernels)

    @property
    def spill_bytes(self) -> int:
        """Spill stores plus loads over every kernel and function."""
        return sum(k.spill_bytes for k in [*self.kernels.values(), *self.functions.values()])

    @property
    def has_spills(self) -> bool:
        return self.spill_bytes > 0

    def __str__(self) -> str:
        lines = [f"ptxas {self.arch}:"]
        header = ("name", "regs", "spill st", "spill ld", "stack", "smem", "barriers")
        rows = [(("" if k.entry else "func ") + k.name, k.registers, k.spill_stores,
                 k.spill_loads, k.stack_frame, k.shared_bytes, k.barriers)
                for k in [*self.kernels.values(), *self.functions.values()]]
        widths = [max(len(str(r[i])) for r in [header, *rows]) for i in range(len(header))]
        for row in [header, *rows]:
            lines.append("  " + "  ".join(
                str(v).ljust(w) if i == 0 else str(v).rjust(w)
                for i, (v, w) in enumerate(zip(row, widths))))
        lines += [f"  warning: {w}" for w in self.warnings]
        return "\n".join(lines)


# ---- finding ptxas ------------------------------------------------------------------------

def _wheel_candidates(exe: str = _EXE) -> list[str]:
    found: list[str] = []
    roots: list[str] = []
    for entry in sys.path:
        if entry and os.path.isdir(os.path.join(entry, "nvidia")):
            roots.append(os.path.join(entry, "nvidia"))
    try:  # a namespace package may also live outside sys.path's plain folders
        import importlib.util

        spec = importlib.util.find_spec("nvidia")
        if spec is not None and spec.submodule_search_locations:
            roots.extend(spec.submodule_search_locations)
    except (ImportError, ValueError):
        pass
    seen: set[str] = set()
    for root in roots:
        root = os.path.realpath(root)
        if root in seen:
            continue
        seen.add(root)
        # newest CUDA first: cu13 before cuda_nvcc (CUDA 12), then anything else
        patterns = ("cu13/bin", "cu1[4-9]/bin", "cuda_nvcc/bin", "*/bin")
        for pattern in patterns:
            for path in sorted(glob.glob(os.path.join(root, pattern, exe)), reverse=True):
                if path not in found:
                    found.append(path)
    return found


def _is_executable(path: str) -> bool:
    return os.path.isfile(path) and os.access(path, os.X_OK)


def find_ptxas() -> str:
    """The path of the ptxas executable to use (see the module docstring for the order)."""
    env = os.environ.get("TILEVM_PTXAS")
    if env:
        if _is_executable(env):
            return env
        raise PtxasNotFoundError(
            f"TILEVM_PTXAS is set to {env!r}, which is not an executable file")
    on_path = shutil.which("ptxas")
    if on_path:
        return on_path
    for var in ("CUDA_HOME", "CUDA_PATH"):
        home = os.environ.get(var)
        if home and _is_executable(os.path.join(home, "bin", _EXE)):
            return os.path.join(home, "bin", _EXE)
    if _is_executable(os.path.join("/usr/local/cuda/bin", _EXE)):
        return os.path.join("/usr/local/cuda/bin", _EXE)
    for path in _wheel_candidates():
        if _is_executable(path):
            return path
    raise PtxasNotFoundError(
        "ptxas was not found: set TILEVM_PTXAS to its path, put it on PATH (a CUDA "
        "toolkit's bin/), or `pip install nvidia-cuda-nvcc` (the wheel ships ptxas)")


class CudaToolNotFoundError(FileNotFoundError):
    """A CUDA toolkit program other than ptxas was not found."""


def find_cuda_tool(name: str) -> str:
    """Another program of the CUDA toolkit (`nvdisasm`, `compute-sanitizer`): on `PATH`;
    else beside the ptxas `find_ptxas` picks, or in that toolkit's `name/` folder (where
    compute-sanitizer lives); else in an `nvidia-*` wheel's bin/. Not found:
    `CudaToolNotFoundError`, saying where it was looked for."""
    on_path = shutil.which(name)
    if on_path:
        return on_path
    places = []
    try:
        bin_dir = os.path.dirname(find_ptxas())
        places += [os.path.join(bin_dir, name), os.path.join(bin_dir, "..", name, name)]
    except PtxasNotFoundError:
        pass
    for path in [*places, *_wheel_candidates(name)]:
        if _is_executable(path):
            return os.path.normpath(path)
    raise CudaToolNotFoundError(
        f"{name} was not found on PATH, beside ptxas or in an nvidia wheel: put a CUDA "
        f"toolkit's bin/ on PATH")


@functools.lru_cache(maxsize=8)
def _version_of(path: str) -> str:
    out = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=60)
    m = re.search(r"release (\d+\.\d+), V([\d.]+)", out.stdout)
    return m.group(2) if m else out.stdout.strip().splitlines()[-1]


def ptxas_version(path: str | None = None) -> str:
    """The version of ptxas (e.g. "13.0.88")."""
    return _version_of(path or find_ptxas())


# ---- running it ---------------------------------------------------------------------------

def _check_arch(arch: str) -> str:
    if arch not in SUPPORTED_ARCHS:
        raise ValueError(f"unsupported target architecture {arch!r}; supported: "
                         f"{', '.join(SUPPORTED_ARCHS)}")
    return arch


def check_ptx(ptx: str, arch: str = "sm_80", *, max_registers: int | None = None,
              options: Sequence[str] = (), ptxas: str | None = None,
              timeout: float = 600.0) -> ResourceReport:
    """Assemble `ptx` for `arch` with ptxas and return its resource report.

    `max_registers` passes `--maxrregcount`; `options` are more ptxas flags; `ptxas` is
    an executable to use instead of `find_ptxas()`. Raises `PTXError` if ptxas rejects
    the text, `PtxasNotFoundError` if there is no ptxas, `ValueError` for an
    unsupported architecture.
    """
    log, _, exe = _assemble(ptx, arch, max_registers, options, ptxas, timeout)
    return parse_report(log, arch, exe)


def assemble(ptx: str, arch: str = "sm_80", *, ptxas: str | None = None,
             timeout: float = 600.0) -> bytes:
    """The cubin (ELF) ptxas makes of `ptx` for `arch`; errors as `check_ptx`'s."""
    return _assemble(ptx, arch, None, (), ptxas, timeout)[1]


def _assemble(ptx: str, arch: str, max_registers: int | None, options: Sequence[str],
              ptxas: str | None, timeout: float) -> tuple[str, bytes, str]:
    """(ptxas' log, the cubin, the ptxas that ran) of `ptx` for `arch`."""
    _check_arch(arch)
    if not isinstance(ptx, str):
        raise TypeError(f"ptxas takes PTX text (str), not {type(ptx).__name__}")
    exe = ptxas or find_ptxas()
    with tempfile.TemporaryDirectory(prefix="tilevm-ptxas-") as tmp:
        src = os.path.join(tmp, "kernel.ptx")
        with open(src, "w", encoding="utf-8") as f:
            f.write(ptx)
        out = os.path.join(tmp, "kernel.cubin")
        cmd = [exe, "-v", "--gpu-name", arch, "-o", out]
        if max_registers is not None:
            cmd += ["--maxrregcount", str(int(max_registers))]
        cmd += [*options, src]
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
        except OSError as exc:
            raise PtxasNotFoundError(f"could not run ptxas at {exe!r}: {exc}") from exc
        log = (proc.stdout + proc.stderr).replace(src, "<ptx>")
        if proc.returncode != 0:
            raise _ptx_error(log, ptx, arch, proc.returncode)
        with open(out, "rb") as f:
            cubin = f.read()
    return log, cubin, exe


class DisassemblyError(RuntimeError):
    """nvdisasm refused a cubin (its words in the message)."""


def disassemble(cubin: bytes, *, timeout: float = 300.0) -> str:
    """nvdisasm's text of a cubin's code sections (`nvdisasm -c`: the machine code, each
    instruction with its address and encoding). nvdisasm not found:
    `CudaToolNotFoundError`; one that refuses the cubin: `DisassemblyError`."""
    exe = find_cuda_tool("nvdisasm")
    with tempfile.TemporaryDirectory(prefix="tilevm-sass-") as tmp:
        path = os.path.join(tmp, "kernel.cubin")
        with open(path, "wb") as f:
            f.write(cubin)
        proc = subprocess.run([exe, "-c", path], capture_output=True, text=True,
                              timeout=timeout)
    if proc.returncode != 0 or "error" in proc.stderr:
        raise DisassemblyError(f"nvdisasm could not disassemble the cubin: "
                               f"{proc.stderr.strip()[:500]}")
    return proc.stdout


_LINE_RE = re.compile(r"line (\d+);")


def annotate_log(log: str, ptx: str, limit: int = _ERROR_LINES) -> tuple[str, list[str]]:
    """The first `limit` error lines of a ptxas (or driver JIT) log, each followed by the
    PTX line it cites, quoted; and all its error lines."""
    lines = [ln for ln in log.splitlines() if ln.strip()]
    errors = [ln for ln in lines if "error" in ln or "fatal" in ln] or lines
    source = ptx.splitlines()
    shown: list[str] = []
    for ln in errors[:limit]:
        shown.append(ln)
        m = _LINE_RE.search(ln)
        if m:
            n = int(m.group(1))
            if 1 <= n <= len(source):
                shown.append(f"    {n:5d} | {source[n - 1].strip()}")
    more = len(errors) - limit
    if more > 0:
        shown.append(f"... {more} more error line(s)")
    return "\n".join(shown), errors


def _ptx_error(log: str, ptx: str, arch: str, rc: int) -> PTXError:
    shown, errors = annotate_log(log, ptx)
    message = f"ptxas rejected the PTX for {arch} (exit status {rc}):\n" + shown
    return PTXError(message, log=log, errors=errors, arch=arch)


_NUM = r"(\d+)"


def parse_report(log: str, arch: str, ptxas: str = "") -> ResourceReport:
    """Parse the output of `ptxas -v` into a `ResourceReport`."""
    props: dict[str, dict[str, int]] = {}
    used: dict[str, dict[str, int]] = {}
    entries: list[str] = []
    warnings: list[str] = []
    current: str | None = None  # the entry kernel whose "Used ..." line comes next
    props_for: str | None = None  # the function whose property line comes next
    for raw in log.splitlines():
        line = raw.strip()
        m = re.search(r"Compiling entry function '([^']+)'", line)
        if m:
            current = m.group(1)
            if current not in entries:
                entries.append(current)
            continue
        m = re.search(r"Function properties for (\S+)", line)
        if m:
            props_for = m.group(1).strip("'")
            continue
        if props_for is not None and "stack frame" in line:
            d = props.setdefault(props_for, {})
            for key, pat in (("stack_frame", "bytes stack frame"),
                             ("spill_stores", "bytes spill stores"),
                             ("spill_loads", "bytes spill loads")):
                m = re.search(_NUM + " " + pat, line)
                if m:
                    d[key] = int(m.group(1))
            props_for = None
            continue
        if line.startswith("ptxas info") and re.search(r"Used \d+ registers", line):
            name = current or (entries[-1] if entries else "")
            d = used.setdefault(name, {})
            for key, pat in (("registers", r"Used (\d+) registers"),
                             ("barriers", r"used (\d+) barriers"),
                             ("shared_bytes", r"(\d+) bytes smem"),
                             ("cmem0", r"(\d+) bytes cmem\[0\]")):
                m = re.search(pat, line)
                if m:
                    d[key] = int(m.group(1))
            continue
        if line.startswith("ptxas warning") or (
                line.startswith("ptxas info") and "Performance Loss" in line):
            # (the info lines are ptxas's performance advisories, e.g. C7513: every wgmma
            # of a kernel serialized; reported like warnings, the PTX is still valid)
            warnings.append(line.split(":", 1)[1].strip() if ":" in line else line)
    kernels = {name: KernelResources(name, True, **props.get(name, {}), **used.get(name, {}))
               for name in entries}
    functions = {name: KernelResources(name, False, **d)
                 for name, d in props.items() if name not in kernels}
    return ResourceReport(arch, kernels, functions, tuple(warnings), log, ptxas)
