"""The Python frontend that builds VM IR from ordinary Python functions (`kernel`), the
user-facing language (`lang`, re-exported as `tilevm.*`), and the reference
interpreter that runs programs on numpy (`interpreter`)."""

from tilevm.vm import lang
from tilevm.vm.frontend import Kernel, KernelParam, KernelSignature, kernel
from tilevm.vm.frontend_values import Scalar, Tile

__all__ = ["lang", "Kernel", "KernelParam", "KernelSignature", "kernel", "Scalar", "Tile"]
