"""Compile a program for the current GPU (through the on-disk cache) and launch it.

    kernel = compiled_kernel(program)          # compiles once, then a cache hit
    kernel(x_dev, y_dev, out_dev, n)            # device arrays / torch / CuPy tensors

`launch_program(program, args)` takes the interpreter's argument form (numpy arrays and
Python scalars): it copies the arrays to the device, launches, and copies every array
a non-`const` pointer points to back into place. Tests use it to compare a compiled
kernel with the interpreter on the same inputs.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Any

import numpy as np

from tilevm.backend import cache, pipeline
from tilevm.backend.analysis import target, tma
from tilevm.backend.analysis.signature import signature_from_program
from tilevm.backend.cuda.device_array import DeviceArray
from tilevm.backend.cuda.driver import device_arch
from tilevm.backend.cuda.kernel import Kernel
from tilevm.backend.cuda.module import load_artifact
from tilevm.ir.printer import format_program
from tilevm.ir.stmt import Program
from tilevm.ir.types import Pointer


def build_artifact(program: Program, arch: str) -> cache.Artifact:
    compiled = pipeline.compile_program(program, arch)
    signature = signature_from_program(program)
    # The wait compiles to nothing before sm_90: such code must never be launched early.
    signature = replace(signature, tensor_maps=tma.tensor_maps(compiled.lowered),
                        num_threads=compiled.num_threads,
                        dependent_launch=signature.dependent_launch
                        and target.target(arch).dependent_launch)
    return cache.Artifact(ptx=compiled.ptx, kernel_name=program.name,
                          shared_bytes=compiled.shared_bytes,
                          num_threads=compiled.num_threads,
                          extra={"signature": signature.to_json()})


_LOADED: dict[str, Kernel] = {}  # modules loaded in this process, by cache key


def current_arch() -> str:
    """The target that kernels are compiled for by default: the current device's
    (`target.native_arch`: sm_90a on sm_90)."""
    return target.native_arch(device_arch())


def cache_key(program: Program, arch: str) -> cache.CacheKey:
    """The kernel cache's key of `program` built for `arch`."""
    return cache.CacheKey(format_program(program), arch)


def compiled_kernel(program: Program, arch: str | None = None) -> Kernel:
    """The loaded kernel of `program` for `arch` (default: `current_arch()`)."""
    arch = arch or current_arch()
    key = cache_key(program, arch)
    digest = key.digest()
    if digest not in _LOADED:
        artifact = cache.get_or_build(key, lambda: build_artifact(program, arch))
        _LOADED[digest] = load_artifact(artifact)
    return _LOADED[digest]


def launch_program(program: Program, args: Sequence[Any], arch: str | None = None) -> None:
    """Run `program` on the GPU with the interpreter's argument form (see above)."""
    kernel = compiled_kernel(program, arch)
    device_args, copies = to_device(program, args)
    kernel(*device_args)
    copy_back(copies)


def to_device(program: Program, args: Sequence[Any]
              ) -> tuple[list[Any], list[tuple[np.ndarray, DeviceArray]]]:
    """The interpreter's argument form on the device: each numpy array for a pointer
    parameter copied into a `DeviceArray` (in host form, `host_dtype`; a sub-byte type's
    packed bytes hold every whole element), other arguments as they are; and the (host,
    device) pairs of the non-`const` pointers, for `copy_back`."""
    device_args: list[Any] = []
    copies: list[tuple[np.ndarray, DeviceArray]] = []
    for param, value in zip(program.params, args):
        if isinstance(param, Pointer) and isinstance(value, np.ndarray):
            array = DeviceArray.from_numpy(value, param.type.dtype)
            device_args.append(array)
            if not param.type.readonly:
                copies.append((value, array))
        else:
            device_args.append(value)
    return device_args, copies


def copy_back(copies: Sequence[tuple[np.ndarray, DeviceArray]]) -> None:
    """Copy each device array of `to_device` back into its host array, in place."""
    for host, array in copies:
        host[...] = array.to_numpy().reshape(host.shape).view(host.dtype)
