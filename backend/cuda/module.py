"""Loading PTX into the current CUDA context (`cuModuleLoadDataEx`) and finding its kernels.

    module = load_module(ptx_text)
    kernel = module.get_function("vector_add", signature)

A module belongs to the context it was loaded in. A module the driver rejects raises
`ModuleLoadError` with the JIT compiler's log (or ptxas' diagnosis where the driver gave
none). `load_artifact` loads an entry of the on-disk kernel cache with its signature.
"""

from __future__ import annotations

from typing import Any

from tilevm.backend.analysis.signature import Signature
from tilevm.backend.cuda import driver
from tilevm.backend.cuda.driver import Context
from tilevm.backend.cuda.errors import CudaError, ModuleLoadError
from tilevm.backend.cuda.kernel import Kernel
from tilevm.backend.ptxas import SUPPORTED_ARCHS, PTXError, annotate_log, check_ptx
from tilevm.ir.stmt import entry_registers

__all__ = ["Module", "load_module", "load_artifact", "check_entry_registers"]

_LOG_BYTES = 64 * 1024


class Module:
    """A loaded PTX module (in the context that was current when it was loaded)."""

    def __init__(self, handle: Any, context: Context, ptx: str, info_log: str = "") -> None:
        self.handle = handle
        self.context = context
        self.ptx = ptx
        self.info_log = info_log
        self._kernels: dict[str, Kernel] = {}

    def get_function(self, name: str, signature: Signature | None = None, *,
                     num_threads: int | None = None, shared_bytes: int = 0) -> Kernel:
        """The kernel `name`; with a `signature`, launches validate their arguments."""
        if self.handle is None:
            raise CudaError("the module was unloaded")
        drv = driver.bindings()
        try:
            fn = driver.call(f"cuModuleGetFunction({name!r})",
                             drv.cuModuleGetFunction(self.handle, name.encode()))
        except CudaError as exc:
            raise CudaError(f"no kernel {name!r} in the module ({exc})", exc.code) from None
        return Kernel(self, fn, name, signature, num_threads=num_threads,
                      shared_bytes=shared_bytes)

    def unload(self) -> None:
        """Unload the module from its context (its kernels can no longer launch)."""
        if self.handle is not None:
            drv = driver.bindings()
            driver.call("cuModuleUnload", drv.cuModuleUnload(self.handle))
            self.handle = None


def load_module(ptx: str | bytes, *, cubin: bytes | None = None) -> Module:
    """Load PTX text into the current context (`ensure_context`), or, given `cubin`, that
    machine code in its place (`ptx` is then kept as the module's source, for
    diagnostics). A rejected module raises `ModuleLoadError` with the JIT compiler's
    error log (or, where the driver gave none, ptxas' diagnosis of the text for this
    device)."""
    ctx = driver.ensure_context()
    drv = driver.bindings()
    text = ptx.decode() if isinstance(ptx, bytes) else ptx
    image = cubin if cubin is not None else text.encode() + b"\0"
    err_buf = bytearray(_LOG_BYTES)
    info_buf = bytearray(_LOG_BYTES)
    opt = drv.CUjit_option
    options = [opt.CU_JIT_ERROR_LOG_BUFFER, opt.CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES,
               opt.CU_JIT_INFO_LOG_BUFFER, opt.CU_JIT_INFO_LOG_BUFFER_SIZE_BYTES]
    values = [err_buf, _LOG_BYTES, info_buf, _LOG_BYTES]
    try:
        err, handle = drv.cuModuleLoadDataEx(image, len(options), options, values)
    except (TypeError, ValueError):  # bindings that take no buffers: no log
        err, handle = drv.cuModuleLoadData(image)
    if err != drv.CUresult.CUDA_SUCCESS:
        log = _cstr(err_buf)
        shown = annotate_log(log, text)[0] if log else _ptxas_diagnosis(text, ctx)
        name = driver.error_name(drv, err)
        what = "machine code (cubin)" if cubin is not None else "PTX module"
        raise ModuleLoadError(f"the CUDA driver could not load the {what}: {name}: "
                              f"{driver.error_text(drv, err)}" + (f"\n{shown}" if shown else ""),
                              name, log or shown)
    return Module(handle, ctx, text, _cstr(info_buf))


def _cstr(buf: bytearray) -> str:
    return bytes(buf).split(b"\0", 1)[0].decode(errors="replace").strip()


def _ptxas_diagnosis(ptx: str, ctx: Context) -> str:
    try:
        arch = ctx.arch
        check_ptx(ptx, arch if arch in SUPPORTED_ARCHS else "sm_80")
    except PTXError as exc:
        return str(exc)
    except Exception:
        return ""
    return ""


def load_artifact(artifact: Any, *, cubin: bytes | None = None) -> Kernel:
    """Load a cached `cache.Artifact` and return its kernel, with its signature (from
    `artifact.extra["signature"]` if there, else from `artifact.params`); with `cubin`,
    from that machine code of its PTX (`load_module`)."""
    sig_json = artifact.extra.get("signature") if artifact.extra else None
    if sig_json is None:
        sig_json = {"name": artifact.kernel_name, "params": list(artifact.params),
                    "num_threads": artifact.num_threads}
    signature = Signature.from_json(sig_json)
    module = load_module(artifact.ptx, cubin=cubin)
    kernel = module.get_function(artifact.kernel_name, signature,
                                 num_threads=artifact.num_threads,
                                 shared_bytes=artifact.shared_bytes)
    if "setmaxnreg.inc" in artifact.ptx:
        check_entry_registers(kernel, artifact.num_threads)
    return kernel


def check_entry_registers(kernel: Kernel, block_threads: int) -> None:
    """A kernel whose producer warpgroup gives registers to the other warps
    (`setmaxnreg`) must start with the registers `Program.body_registers` was computed
    from: with fewer, the other warps' `setmaxnreg.inc` would wait forever for registers
    the block's pool does not hold."""
    expected = entry_registers(block_threads)
    got = kernel.attribute("CU_FUNC_ATTRIBUTE_NUM_REGS")
    if got != expected:
        raise ModuleLoadError(
            f"kernel {kernel.name} was compiled to {got} registers a thread, not the "
            f"{expected} that its {block_threads} threads' setmaxnreg assumes (it would "
            "hang): the PTX assembler did not give it the whole register file")

