"""backend/cuda/ (the GPU runtime) and backend/cuda/device_array.py.

CPU tests: the signature of a program, argument validation (fake device arrays carrying
`__cuda_array_interface__` or DLPack), parameter packing, streams, and a clear error
without a driver. GPU tests (`gpu` marker): hand-written PTX kernels loaded and launched,
DeviceArray round trips, PyTorch/CuPy interop, more than 48 KiB of dynamic shared memory.
"""

from __future__ import annotations

import ctypes
import sys

import numpy as np
import pytest
from kernel_harness import GOLDEN, PROGRAMS

from tilevm.backend import cuda
from tilevm.backend.analysis.signature import ParamSpec, Signature, signature_from_program
from tilevm.backend.cuda import driver
from tilevm.backend.cuda.device_array import DeviceArray, host_dtype
from tilevm.backend.cuda.errors import ArgumentTypeError, ArgumentValueError, NoDriverError
from tilevm.backend.cuda.kernel import Kernel
from tilevm.backend.cuda.params import pack_bound, pack_scalar
from tilevm.backend.cuda.streams import resolve_stream
from tilevm.backend.cuda.validate import BoundPointer, BoundScalar, grid_for, validate_args
from tilevm.dtypes import pack, parse
from tilevm.ir import VMError, parse_program


def has_gpu() -> bool:
    from conftest import cuda_device_count

    return cuda_device_count() > 0


class FakeCuda:
    """A device array as CuPy or Numba show it: only `__cuda_array_interface__`."""

    def __init__(self, n: int | tuple[int, ...], typestr: str = "<f2", ptr: int = 0x7F0000000000,
                 readonly: bool = False, strides: tuple[int, ...] | None = None) -> None:
        shape = (n,) if isinstance(n, int) else n
        self.__cuda_array_interface__ = {"shape": shape, "typestr": typestr,
                                         "data": (ptr, readonly), "strides": strides,
                                         "version": 3}


class FakeDLPack:
    """A numpy array pretending to live on a device (DLPack device type `device`)."""

    def __init__(self, array: np.ndarray, device: int = 2, versioned: bool = False) -> None:
        self.array = array
        self.device = device
        self.versioned = versioned

    def __dlpack_device__(self) -> tuple[int, int]:
        return (self.device, 0)

    def __dlpack__(self, stream=None):
        if self.versioned:  # DLPack 1.x: "dltensor_versioned" capsule, with flags
            return self.array.__dlpack__(max_version=(1, 0))
        return self.array.__dlpack__()


@pytest.fixture(scope="module")
def vector_add():
    return parse_program((GOLDEN / "vector_add.vm").read_text())


@pytest.fixture(scope="module")
def sig(vector_add) -> Signature:
    return signature_from_program(vector_add)


def f16_args(n: int = 1000, size: int | None = None):
    size = n if size is None else size
    return [FakeCuda(size), FakeCuda(size), FakeCuda(size), n]


# ---- the signature ----------------------------------------------------------------------------

def test_signature_from_program(sig: Signature) -> None:
    assert [str(p) for p in sig.params] == ["x: const ptr<f16>", "y: const ptr<f16>",
                                            "out: ptr<f16>", "n: int32"]
    assert [p.kind for p in sig.params] == ["pointer"] * 3 + ["scalar"]
    assert sig.params[0].readonly and not sig.params[2].readonly
    assert sig.params[0].required_align == 16
    assert [v.param for v in sig.views] == ["x", "y", "out"]
    assert sig.num_threads == 128
    assert grid_for(sig, f16_args(1000)) == (4, 1, 1)
    assert grid_for(sig, f16_args(0)) == (0, 1, 1)


def test_signature_json_round_trip(sig: Signature) -> None:
    import json

    again = Signature.from_json(json.loads(json.dumps(sig.to_json())))
    assert again == sig


def test_signature_skips_views_that_depend_on_the_block() -> None:
    text = """\
kernel k(a: ptr<int4>, b: ptr<f32>, n: int32) grid(1) warps(1) {
  %g = global_view ptr=a, offset=0, strides=(1,) : global<int4>[n]
  let base: int32 = (block_idx.x * 64)
  %h = global_view ptr=b, offset=base, strides=(1,) : global<f32>[64]
  let m: int32 = (n * 2)
  %i = global_view ptr=b, offset=1, strides=(1,) : global<f32>[m]
}
"""
    s = signature_from_program(parse_program(text))
    assert [(v.param, str(v.shape[0])) for v in s.views] == [("a", "n"), ("b", "(n * 2)")]


# ---- validation (no GPU) ------------------------------------------------------------------------

def test_good_arguments_bind(sig: Signature) -> None:
    args = f16_args(1000)
    bound = validate_args(sig, args)
    assert [type(b) for b in bound] == [BoundPointer] * 3 + [BoundScalar]
    assert bound[0].address == 0x7F0000000000 and bound[3].value == 1000
    assert validate_args(sig, (*args[:3], np.int32(7)))[3].value == 7  # tuple, numpy int
    assert validate_args(sig, [*args[:3], np.array(7)])[3].value == 7  # 0-d array
    assert validate_args(sig, [*args[:3], True])[3].value == 1


def test_wrong_count(sig: Signature) -> None:
    with pytest.raises(ArgumentTypeError, match=r"takes 4 argument\(s\) \(x: const ptr<f16>"):
        validate_args(sig, f16_args()[:3])
    with pytest.raises(TypeError, match="list or tuple"):
        validate_args(sig, "abcd")


def test_errors_are_type_and_value_errors_and_vm_errors(sig: Signature) -> None:
    with pytest.raises(TypeError) as t:
        validate_args(sig, [FakeCuda(1000, "<f4"), *f16_args()[1:]])
    assert isinstance(t.value, VMError)
    with pytest.raises(ValueError) as v:
        validate_args(sig, [*f16_args()[:3], 2**31])
    assert isinstance(v.value, VMError)


def test_wrong_dtype_names_the_parameter(sig: Signature) -> None:
    args = f16_args()
    args[2] = FakeCuda(1000, "<f4")
    with pytest.raises(ArgumentTypeError,
                       match=r"argument 2 \(out: ptr<f16>\) must hold float16, got <f4"):
        validate_args(sig, args)


def test_pointer_given_a_scalar_and_scalar_given_an_array(sig: Signature) -> None:
    with pytest.raises(ArgumentTypeError, match="must be a CUDA array of float16"):
        validate_args(sig, [12345, *f16_args()[1:]])
    with pytest.raises(ArgumentTypeError, match="is a scalar"):
        validate_args(sig, [*f16_args()[:3], FakeCuda(1)])
    with pytest.raises(ArgumentTypeError, match="must be a CUDA array"):
        validate_args(sig, [object(), *f16_args()[1:]])


def test_host_arrays_are_rejected(sig: Signature) -> None:
    host = np.zeros(1000, np.float16)
    with pytest.raises(ArgumentTypeError, match=r"argument 0 \(x: .*\) is on the cpu device"):
        validate_args(sig, [host, *f16_args()[1:]])
    with pytest.raises(ArgumentTypeError, match=r"argument 1 \(y: .*\) is on the cpu device"):
        validate_args(sig, [FakeCuda(1000), FakeDLPack(host, device=1), *f16_args()[2:]])


def test_torch_cpu_tensor_is_rejected(sig: Signature) -> None:
    torch = pytest.importorskip("torch")
    t = torch.zeros(1000, dtype=torch.float16)
    with pytest.raises(ArgumentTypeError, match=r"argument 2 \(out: ptr<f16>\) is on the cpu"):
        validate_args(sig, [*f16_args()[:2], t, 1000])


def test_dlpack_is_read(sig: Signature) -> None:
    host = np.zeros(1024, np.float16)
    bound = validate_args(sig, [FakeDLPack(host), *f16_args(1000)[1:]])
    assert bound[0].address == host.ctypes.data
    assert bound[0].buffer.nbytes == 2048 and bound[0].buffer.source == "DLPack"
    with pytest.raises(ArgumentTypeError, match="must hold float16, got DLPack float32"):
        validate_args(sig, [FakeDLPack(np.zeros(1024, np.float32)), *f16_args()[1:]])
    strided = np.zeros((1024, 2), np.float16)[:, 0]
    with pytest.raises(ArgumentValueError, match="contiguous"):
        validate_args(sig, [FakeDLPack(strided), *f16_args()[1:]])


def test_dlpack_versioned_capsule(sig: Signature) -> None:
    host = np.zeros(1024, np.float16)
    try:
        host.__dlpack__(max_version=(1, 0))
    except TypeError:
        pytest.skip("this numpy exports no versioned DLPack capsules")
    bound = validate_args(sig, [*f16_args(1000)[:2], FakeDLPack(host, versioned=True), 1000])
    assert bound[2].address == host.ctypes.data and bound[2].buffer.nbytes == 2048
    host.flags.writeable = False
    with pytest.raises(ArgumentValueError, match="read-only"):
        validate_args(sig, [*f16_args(1000)[:2], FakeDLPack(host, versioned=True), 1000])


def test_misaligned_pointer(sig: Signature) -> None:
    args = f16_args()
    args[1] = FakeCuda(1000, ptr=0x7F0000000002)
    with pytest.raises(ArgumentValueError, match=r"argument 1 \(y: .*\): address 0x7f0000000002 "
                                                 r"is not 16-byte aligned"):
        validate_args(sig, args)
    # alignment to the element size is the floor when the code assumes less
    loose = Signature("k", (ParamSpec("p", "pointer", parse("f32")),))
    validate_args(loose, [FakeCuda(4, "<f4", ptr=0x1004)])
    with pytest.raises(ArgumentValueError, match="4-byte aligned"):
        validate_args(loose, [FakeCuda(4, "<f4", ptr=0x1002)])


def test_non_contiguous_and_readonly(sig: Signature) -> None:
    args = f16_args()
    args[0] = FakeCuda((1000, 2), strides=(8, 2))  # rows of 4 elements, 2 shown
    with pytest.raises(ArgumentValueError, match="contiguous"):
        validate_args(sig, args)
    args = f16_args()
    args[0] = FakeCuda(1000, strides=(2,))  # explicit C-contiguous strides are fine
    validate_args(sig, args)
    args = f16_args()
    args[2] = FakeCuda(1000, readonly=True)
    with pytest.raises(ArgumentValueError, match="writes through this pointer"):
        validate_args(sig, args)
    args = f16_args()
    args[0] = FakeCuda(1000, readonly=True)  # const pointer: fine
    validate_args(sig, args)


def test_sizes_are_consistent(sig: Signature) -> None:
    validate_args(sig, f16_args(1000, size=1000))
    validate_args(sig, f16_args(1000, size=1200))
    with pytest.raises(ArgumentValueError,
                       match=r"argument 0 \(x: const ptr<f16>\) is too small for these sizes: "
                             r"the kernel views it as f16\[1001\] reaching element 1000 "
                             r"\(2002 bytes\), but the array has 2000 bytes"):
        validate_args(sig, f16_args(1001, size=1000))
    validate_args(sig, f16_args(0, size=0))  # an empty view needs nothing


def test_scalar_range_and_kind(sig: Signature) -> None:
    with pytest.raises(ArgumentValueError, match=r"2147483648 is out of range for int32"):
        validate_args(sig, [*f16_args()[:3], 2**31])
    with pytest.raises(ArgumentTypeError, match="must be an int, got float"):
        validate_args(sig, [*f16_args()[:3], 1000.0])
    with pytest.raises(ArgumentTypeError, match="must be an int, got str"):
        validate_args(sig, [*f16_args()[:3], "1000"])
    s = Signature("s", (ParamSpec("a", "scalar", parse("int8")),
                        ParamSpec("h", "scalar", parse("f16")),
                        ParamSpec("e", "scalar", parse("f4e2m1"))))
    validate_args(s, [-128, 65504.0, 6])
    with pytest.raises(ArgumentValueError, match=r"200 is out of range for int8 \[-128, 127\]"):
        validate_args(s, [200, 0.0, 0.0])
    with pytest.raises(ArgumentValueError, match="out of range for f16"):
        validate_args(s, [0, 1e6, 0.0])
    validate_args(s, [0, float("inf"), 0.0])  # f16 has infinities
    with pytest.raises(ArgumentValueError, match="f4e2m1 has no infinity"):
        validate_args(s, [0, 0.0, float("inf")])
    with pytest.raises(ArgumentValueError, match="f4e2m1 has no NaN"):
        validate_args(s, [0, 0.0, float("nan")])
    with pytest.raises(ArgumentTypeError, match="must be a number"):
        validate_args(s, [0, True, 0.0])


@pytest.mark.parametrize("dtype, ok, bad", [
    ("int4", ["|u1", "|i1"], ["<f2", "<i4", "|b1"]),
    ("f6e3m2", ["|u1", "|i1"], ["<f4"]),
    ("uint1", ["|u1"], ["|b1"]),
    ("bf16", ["<u2", "<i2"], ["<f2", "<f4"]),
    ("f8e4m3", ["|u1", "|i1"], ["<f2"]),
    ("int8", ["|i1"], ["|u1"]),
    ("uint32", ["<u4"], ["<i4", "<f4"]),
    ("int64", ["<i8"], ["<u8"]),
    ("f32", ["<f4"], ["<f2", "<f8", "<i4"]),
])
def test_pointer_dtypes(dtype: str, ok: list[str], bad: list[str]) -> None:
    s = Signature("k", (ParamSpec("p", "pointer", parse(dtype)),))
    for typestr in ok:
        validate_args(s, [FakeCuda(64, typestr)])
    for typestr in bad:
        with pytest.raises(ArgumentTypeError, match=r"argument 0 \(p: ptr<"):
            validate_args(s, [FakeCuda(64, typestr)])


def test_sub_byte_message_says_packed_bytes() -> None:
    s = Signature("k", (ParamSpec("w", "pointer", parse("int3"), readonly=True),))
    with pytest.raises(ArgumentTypeError, match="densely packed int3 values"):
        validate_args(s, [FakeCuda(64, "<f2")])


def test_sub_byte_sizes_count_bits() -> None:
    text = """\
kernel k(a: const ptr<int4>, n: int32) grid(1) warps(1) {
  %g = global_view ptr=a, offset=0, strides=(1,) : global<int4>[n]
}
"""
    s = signature_from_program(parse_program(text))
    validate_args(s, [FakeCuda(50, "|u1"), 100])  # 100 int4 values fill 50 bytes
    validate_args(s, [FakeCuda(50, "|u1"), 99])
    with pytest.raises(ArgumentValueError, match=r"int4\[101\] .*\(51 bytes\)"):
        validate_args(s, [FakeCuda(50, "|u1"), 101])


def test_big_endian_and_masks_rejected() -> None:
    s = Signature("k", (ParamSpec("p", "pointer", parse("f32")),))
    with pytest.raises(ArgumentTypeError, match="big-endian"):
        validate_args(s, [FakeCuda(4, ">f4")])
    masked = FakeCuda(4, "<f4")
    masked.__cuda_array_interface__["mask"] = FakeCuda(4, "|b1")
    with pytest.raises(ArgumentTypeError, match="mask"):
        validate_args(s, [masked])


# ---- packing and streams ----------------------------------------------------------------------

def test_pack_scalar() -> None:
    assert pack_scalar(parse("f32"), 1.5).value == 1.5
    assert isinstance(pack_scalar(parse("f32"), 1.5), ctypes.c_float)
    assert pack_scalar(parse("f16"), 1.5).value == 0x3E00
    assert pack_scalar(parse("bf16"), 1.0).value == 0x3F80
    assert pack_scalar(parse("f8e4m3"), 1.0).value == 0x38
    assert pack_scalar(parse("int8"), -1).value == -1
    assert isinstance(pack_scalar(parse("int8"), -1), ctypes.c_int32)
    assert isinstance(pack_scalar(parse("uint16"), 7), ctypes.c_uint32)
    assert isinstance(pack_scalar(parse("int64"), -1), ctypes.c_int64)
    assert pack_scalar(parse("uint64"), 2**64 - 1).value == 2**64 - 1


def test_packed_parameter_array(sig: Signature) -> None:
    bound = validate_args(sig, f16_args(77))
    params = pack_bound(bound)
    slots = (ctypes.c_void_p * 4).from_address(params.address)
    assert ctypes.c_uint64.from_address(slots[0]).value == 0x7F0000000000
    assert ctypes.c_int32.from_address(slots[3]).value == 77


def test_resolve_stream(monkeypatch) -> None:
    if "torch" not in sys.modules:
        assert resolve_stream(None) == 0
    assert resolve_stream(1234) == 1234

    class TorchLike:
        cuda_stream = 42

    class CupyLike:
        ptr = 43

    class Protocol:
        def __cuda_stream__(self):
            return (0, 44)

    assert resolve_stream(TorchLike()) == 42
    assert resolve_stream(CupyLike()) == 43
    assert resolve_stream(Protocol()) == 44
    with pytest.raises(TypeError, match="CUDA stream"):
        resolve_stream("default")


# ---- without a driver ---------------------------------------------------------------------------

@pytest.mark.skipif(has_gpu(), reason="a GPU is present")
def test_no_driver_is_a_clear_error() -> None:
    with pytest.raises(NoDriverError, match="driver|GPU"):
        cuda.ensure_context()
    with pytest.raises(NoDriverError):
        cuda.load_module(".version 8.0\n")
    with pytest.raises(NoDriverError):
        DeviceArray.empty((4,), "f32")


def test_no_cuda_python_is_a_clear_error(monkeypatch) -> None:
    monkeypatch.setitem(sys.modules, "cuda.bindings", None)
    monkeypatch.setitem(sys.modules, "cuda.cuda", None)
    with pytest.raises(NoDriverError, match="cuda-python"):
        driver.bindings()


@pytest.mark.skipif(has_gpu(), reason="a GPU is present")
def test_launch_validates_before_touching_the_driver(sig: Signature) -> None:
    kernel = Kernel(module=None, handle=None, name="vector_add", signature=sig)  # type: ignore
    with pytest.raises(ArgumentTypeError, match="must hold float16"):
        kernel.launch((4,), (128,), 0, [FakeCuda(1000, "<f4"), *f16_args()[1:]])
    with pytest.raises(ArgumentValueError, match="too small"):
        kernel(*f16_args(1000, size=10))
    with pytest.raises(ArgumentValueError, match="1024"):
        kernel.launch((4,), (2048,), 0, f16_args())
    with pytest.raises(NoDriverError):  # valid arguments: only now the driver is needed
        kernel.launch((4,), (128,), 0, f16_args())


def test_host_dtype() -> None:
    assert host_dtype("f16") == np.float16 and host_dtype("f32") == np.float32
    assert host_dtype("bf16") == np.uint16 and host_dtype("f8e5m2") == np.uint8
    assert host_dtype("int4") == np.uint8 and host_dtype("int32") == np.int32
    assert host_dtype("uint64") == np.uint64


# ---- GPU ----------------------------------------------------------------------------------

ADD_ONE = (PROGRAMS / "add_one.ptx").read_text()

ADD_ONE_SIG = Signature("add_one", (ParamSpec("x", "pointer", parse("f32"), align=16),
                                    ParamSpec("n", "scalar", parse("uint32"))))

# Thread t writes t into the last words of the dynamic shared memory (`p_bytes` of it),
# syncs, then copies them to out[t]: past 48 KiB only if the opt-in worked.
SMEM_TAIL = """\
.version 8.0
.target sm_80
.address_size 64
.extern .shared .align 16 .b8 dyn[];

.visible .entry smem_tail(
    .param .u64 p_out,
    .param .u32 p_bytes
)
{
    .reg .b32 %r<8>;
    .reg .b64 %rd<5>;

    ld.param.u64 %rd1, [p_out];
    ld.param.u32 %r1, [p_bytes];
    mov.u32 %r2, %tid.x;
    shl.b32 %r3, %r2, 2;
    sub.u32 %r4, %r1, 4;
    sub.u32 %r4, %r4, %r3;
    mov.u32 %r5, dyn;
    add.u32 %r5, %r5, %r4;
    st.shared.u32 [%r5], %r2;
    bar.sync 0;
    ld.shared.u32 %r6, [%r5];
    cvta.to.global.u64 %rd2, %rd1;
    mul.wide.u32 %rd3, %r2, 4;
    add.s64 %rd4, %rd2, %rd3;
    st.global.u32 [%rd4], %r6;
    ret;
}
"""


@pytest.fixture(scope="module")
def add_one():
    return cuda.load_module(ADD_ONE).get_function("add_one", ADD_ONE_SIG)


@pytest.mark.gpu
def test_gpu_add_one_with_device_array(add_one) -> None:
    host = np.arange(1000, dtype=np.float32)
    x = DeviceArray.from_numpy(host)
    add_one.launch(grid=(-(-1000 // 128),), block=(128,), shared_bytes=0, args=[x, 1000])
    np.testing.assert_array_equal(x.to_numpy(), host + 1)
    add_one.launch(grid=4, block=128, shared_bytes=0, args=[x, np.uint32(10)])
    expected = host + 1
    expected[:10] += 1
    np.testing.assert_array_equal(x.to_numpy(), expected)  # only the first 10 moved
    x.free()


@pytest.mark.gpu
def test_gpu_kernel_without_signature(add_one) -> None:
    kernel = add_one.module.get_function("add_one")
    x = DeviceArray.from_numpy(np.zeros(64, np.float32))
    kernel.launch(1, 64, 0, [x, np.uint32(64)])
    np.testing.assert_array_equal(x.to_numpy(), np.ones(64, np.float32))
    with pytest.raises(ArgumentTypeError, match="numpy scalars"):
        kernel.launch(1, 64, 0, [x, 64])


@pytest.mark.gpu
def test_gpu_device_array_round_trip() -> None:
    rng = np.random.default_rng(0)
    for dtype, host in [("f32", rng.standard_normal(33).astype(np.float32)),
                        ("f16", rng.standard_normal((4, 5)).astype(np.float16)),
                        ("int8", rng.integers(-128, 128, 17).astype(np.int8)),
                        ("uint64", rng.integers(0, 2**63, 3).astype(np.uint64))]:
        a = DeviceArray.from_numpy(host)
        assert a.dtype == parse(dtype) and a.shape == host.shape
        back = a.to_numpy()
        assert back.dtype == host.dtype
        np.testing.assert_array_equal(back, host)
        cai = a.__cuda_array_interface__
        assert cai["version"] == 3 and cai["data"][0] == a.ptr and cai["shape"] == host.shape
    codes = rng.integers(0, 16, 101)
    packed = pack(codes, 4)
    w = DeviceArray.from_numpy(packed, dtype="int4", shape=(101,))
    assert w.nbytes == 51 and w.shape == (101,)
    assert w.__cuda_array_interface__["typestr"] == "|u1"
    assert w.__cuda_array_interface__["shape"] == (51,)
    np.testing.assert_array_equal(w.to_numpy(), packed)
    z = DeviceArray.zeros(10, "bf16")
    np.testing.assert_array_equal(z.to_numpy(), np.zeros(10, np.uint16))
    e = DeviceArray.empty(0, "f32")
    assert e.to_numpy().shape == (0,)
    with pytest.raises(TypeError, match="packed bytes"):
        DeviceArray.from_numpy(np.zeros(4, np.float32), dtype="int4")


@pytest.mark.gpu
def test_gpu_launch_checks_pointer_device_memory(add_one) -> None:
    host = np.zeros(16, np.float32)
    liar = FakeCuda(16, "<f4", ptr=host.ctypes.data & ~15)  # host memory claiming CUDA
    with pytest.raises(ArgumentTypeError, match="not CUDA device memory"):
        add_one.launch(1, 16, 0, [liar, 16])


@pytest.mark.gpu
def test_gpu_large_dynamic_shared_memory() -> None:
    kernel = cuda.load_module(SMEM_TAIL).get_function(
        "smem_tail", Signature("smem_tail", (ParamSpec("out", "pointer", parse("uint32")),
                                             ParamSpec("bytes", "scalar", parse("uint32")))))
    out = DeviceArray.zeros(128, "uint32")
    nbytes = 96 * 1024
    kernel.launch(1, 128, nbytes, [out, nbytes])
    np.testing.assert_array_equal(out.to_numpy(), np.arange(128, dtype=np.uint32))
    kernel.launch(1, 128, 16 * 1024, [out, 16 * 1024])  # smaller again: no attribute change
    optin = driver.device_attribute("CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN",
                                    driver.ensure_context().device)
    with pytest.raises(ArgumentValueError, match="exceed the device"):
        kernel.launch(1, 128, optin + 1024, [out, 1024])


@pytest.mark.gpu
def test_gpu_bad_ptx_reports_the_jit_log() -> None:
    bad = ADD_ONE.replace("add.f32 %f2, %f1, 0f3F800000;", "add.f32 %f2, %f1, %f9;")
    with pytest.raises(cuda.ModuleLoadError) as info:
        cuda.load_module(bad)
    assert "%f9" in str(info.value)
    assert "add.f32 %f2, %f1, %f9;" in str(info.value)  # the PTX line, quoted


@pytest.mark.gpu
def test_gpu_missing_kernel_name() -> None:
    with pytest.raises(cuda.CudaError, match="no kernel 'nope'"):
        cuda.load_module(ADD_ONE).get_function("nope")


@pytest.mark.gpu
def test_gpu_load_artifact() -> None:
    from tilevm.backend.cache import Artifact

    art = Artifact(ptx=ADD_ONE, kernel_name="add_one", num_threads=64,
                   params=tuple(p.to_json() for p in ADD_ONE_SIG.params))
    kernel = cuda.load_artifact(art)
    x = DeviceArray.from_numpy(np.zeros(64, np.float32))
    kernel(x, 64, grid=1)
    np.testing.assert_array_equal(x.to_numpy(), np.ones(64, np.float32))


@pytest.mark.gpu
def test_gpu_torch_interop(add_one) -> None:
    torch = pytest.importorskip("torch")
    x = torch.arange(1000, dtype=torch.float32, device="cuda")
    add_one.launch(8, 128, 0, [x, 1000])  # torch's current stream
    torch.testing.assert_close(x.cpu(), torch.arange(1000, dtype=torch.float32) + 1)
    s = torch.cuda.Stream()
    with torch.cuda.stream(s):
        y = torch.zeros(256, device="cuda")
        add_one.launch(2, 128, 0, [y, 256])  # current = s
    add_one.launch(2, 128, 0, [y, 256], stream=s)
    s.synchronize()
    assert torch.equal(y.cpu(), torch.full((256,), 2.0))
    with pytest.raises(ArgumentTypeError, match=r"argument 0 \(x: ptr<f32>\) is on the cpu"):
        add_one.launch(1, 128, 0, [torch.zeros(4), 4])
    with pytest.raises(ArgumentTypeError, match="must hold float32, got torch.float16"):
        add_one.launch(1, 128, 0, [torch.zeros(4, device="cuda", dtype=torch.float16), 4])
    with pytest.raises(ArgumentValueError, match="aligned"):
        add_one.launch(1, 128, 0, [torch.zeros(8, device="cuda")[1:], 4])
    with pytest.raises(ArgumentValueError, match="contiguous"):
        add_one.launch(1, 128, 0, [torch.zeros(8, 2, device="cuda")[:, 0], 4])
    # a bf16 pointer takes a bfloat16 tensor; sub-byte pointers take uint8 bytes
    s16 = Signature("k", (ParamSpec("p", "pointer", parse("bf16")),
                          ParamSpec("q", "pointer", parse("f4e2m1"))))
    validate_args(s16, [torch.zeros(8, dtype=torch.bfloat16, device="cuda"),
                        torch.zeros(8, dtype=torch.uint8, device="cuda")])
    # DLPack only (as JAX would give): the capsule is read
    dl = FakeDLPackTorch(torch.zeros(64, device="cuda"))
    add_one.launch(1, 64, 0, [dl, 64])
    torch.cuda.synchronize()
    assert torch.equal(dl.tensor.cpu(), torch.ones(64))
    # a DeviceArray is a CUDA array to torch
    d = DeviceArray.from_numpy(np.arange(4, dtype=np.float32))
    assert torch.equal(torch.as_tensor(d, device="cuda").cpu(), torch.arange(4.0))


# Scalars of every width: the runtime passes narrow ones as 32-bit values, of which the
# driver copies as many bytes as each PTX parameter declares.
SCALARS = """\
.version 8.0
.target sm_80
.address_size 64

.visible .entry scalars(
    .param .u64 p_out,
    .param .b16 p_h,
    .param .u8 p_b,
    .param .s8 p_c,
    .param .f32 p_f,
    .param .s64 p_l,
    .param .u16 p_bf
)
{
    .reg .b16 %h<5>;
    .reg .f32 %f<8>;
    .reg .b32 %r<3>;
    .reg .b64 %rd<4>;

    ld.param.u64 %rd1, [p_out];
    cvta.to.global.u64 %rd2, %rd1;
    ld.param.b16 %h1, [p_h];
    cvt.f32.f16 %f1, %h1;
    ld.param.u8 %h2, [p_b];
    cvt.rn.f32.u16 %f2, %h2;
    ld.param.s8 %h3, [p_c];
    cvt.rn.f32.s16 %f3, %h3;
    ld.param.f32 %f4, [p_f];
    ld.param.s64 %rd3, [p_l];
    cvt.rn.f32.s64 %f5, %rd3;
    ld.param.u16 %h4, [p_bf];
    cvt.u32.u16 %r1, %h4;
    shl.b32 %r2, %r1, 16;
    mov.b32 %f6, %r2;
    st.global.f32 [%rd2], %f1;
    st.global.f32 [%rd2+4], %f2;
    st.global.f32 [%rd2+8], %f3;
    st.global.f32 [%rd2+12], %f4;
    st.global.f32 [%rd2+16], %f5;
    st.global.f32 [%rd2+20], %f6;
    ret;
}
"""


@pytest.mark.gpu
def test_gpu_scalar_parameters_of_every_width() -> None:
    sig = Signature("scalars", (ParamSpec("out", "pointer", parse("f32")),
                                ParamSpec("h", "scalar", parse("f16")),
                                ParamSpec("b", "scalar", parse("uint8")),
                                ParamSpec("c", "scalar", parse("int8")),
                                ParamSpec("f", "scalar", parse("f32")),
                                ParamSpec("l", "scalar", parse("int64")),
                                ParamSpec("bf", "scalar", parse("bf16"))))
    kernel = cuda.load_module(SCALARS).get_function("scalars", sig)
    out = DeviceArray.zeros(6, "f32")
    kernel.launch(1, 1, 0, [out, 1.5, 200, -7, 2.25, -123456, -3.0])
    np.testing.assert_array_equal(out.to_numpy(), [1.5, 200, -7, 2.25, -123456, -3.0])


class FakeDLPackTorch:
    def __init__(self, tensor) -> None:
        self.tensor = tensor

    def __dlpack_device__(self):
        return self.tensor.__dlpack_device__()

    def __dlpack__(self, stream=None):
        return self.tensor.__dlpack__()


@pytest.mark.gpu
def test_gpu_cupy_interop(add_one) -> None:
    cupy = pytest.importorskip("cupy")
    x = cupy.arange(300, dtype=cupy.float32)
    stream = cupy.cuda.Stream()
    add_one.launch(3, 128, 0, [x, 300], stream=stream)
    stream.synchronize()
    np.testing.assert_array_equal(cupy.asnumpy(x), np.arange(300, dtype=np.float32) + 1)
    with pytest.raises(ArgumentTypeError, match="must hold float32"):
        add_one.launch(1, 128, 0, [cupy.zeros(4, dtype=cupy.float64), 4])
