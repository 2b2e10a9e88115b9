"""tilevm: a low-precision GPU virtual machine and compiler."""

from tilevm import dtypes

__version__ = "0.1.0"

__all__ = ["dtypes", "__version__"]
