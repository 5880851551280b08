"""The roofline's readings and arithmetic (`measure/roofline.py`); its numbers are a
benchmark's (`benchmarks/roofline.py`), not checked here."""

import pytest

from odestudy.measure import roofline


def test_kernels_are_counted_in_the_compiled_program():
    short, _ = roofline._chain(2, 4)
    long, _ = roofline._chain(8, 4)
    assert roofline.count_kernels(long) - roofline.count_kernels(short) >= 6


def test_the_roofline_is_the_longer_of_arithmetic_and_bytes_plus_the_least_launches():
    probe = {
        "peak_flops_per_s": 1e12,
        "bandwidth_bytes_per_s": 1e9,
        "kernel_s": 2e-6,
        "least_kernels": roofline.LEAST_KERNELS,
    }
    launches = roofline.LEAST_KERNELS * 2e-6
    assert roofline.roofline_s(3e6, 1e3, probe) == pytest.approx(3e-6 + launches)
    assert roofline.roofline_s(3e3, 1e4, probe) == pytest.approx(1e-5 + launches)
    assert roofline.roofline_s(3e6, 1e3, {**probe, "kernel_s": None}) is None
