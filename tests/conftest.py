"""Shared pytest setup: hypothesis profiles and the `gpu` marker.

Hypothesis profiles: `ci` (the default: derandomized, so every run of the suite draws the
same examples and a failure in CI is a failure on every machine) and `thorough` (ten
times the examples, random: new examples each run), and `fuzz` (the frontend fuzzer's
long run, tests/vm/test_fuzz_frontend.py: random, 100,000 programs unless FUZZ_EXAMPLES
says otherwise); choose with `HYPOTHESIS_PROFILE=thorough pytest`.

Tests marked `gpu` run only where a CUDA device answers; elsewhere they are
skipped with the reason, so a CPU-only run never fails or errors on them.
"""

from __future__ import annotations

import functools
import os

import pytest
from hypothesis import HealthCheck, settings

settings.register_profile(
    "ci", max_examples=100, deadline=None, derandomize=True,
    suppress_health_check=[HealthCheck.too_slow])
settings.register_profile(
    "thorough", max_examples=1000, deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.register_profile(
    "fuzz", max_examples=1000, deadline=None, suppress_health_check=list(HealthCheck))
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))


@functools.cache
def cuda_device_count() -> int:
    """Number of CUDA devices the driver reports; 0 without a driver or device."""
    try:
        from cuda.bindings import driver
    except ImportError:
        return 0
    try:
        (err,) = driver.cuInit(0)
        if err != driver.CUresult.CUDA_SUCCESS:
            return 0
        err, count = driver.cuDeviceGetCount()
        return count if err == driver.CUresult.CUDA_SUCCESS else 0
    except Exception:  # no libcuda.so: the bindings raise on first use
        return 0


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if cuda_device_count() > 0:
        return
    skip = pytest.mark.skip(reason="needs a CUDA device (none found)")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)
