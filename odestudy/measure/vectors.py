"""The vector width XLA's CPU backend compiles the step's elementwise kernels with: the
`vector_width` lever, a compile option of the step's own executable.

XLA's CPU backend prefers 256-bit vectors even with AVX-512 (so as not to lower the
clock of other code). The small step is bound by its many small kernels, whose `tanh`
and `log` run faster with 512-bit vectors on AVX-512 machines. Results agree to float32
rounding (a reduction may add in another order); on a GPU the option does not apply.
"""

from typing import Any

# The valid widths, in bits: 0 leaves XLA's default.
VECTOR_WIDTHS: tuple[int, ...] = (0, 256, 512)

# The devices (`Scenario.device`) whose compiler takes the option.
APPLIES_ON: frozenset[str] = frozenset({"cpu"})

# The width of the `wide_vectors` lever (`levers/wide_vectors.py`).
RECOMMENDED_WIDTH = 512


def compiler_options(width: int) -> dict[str, Any] | None:
    """The XLA compile options for `width`-bit vectors (None: XLA's defaults)."""
    return {"xla_cpu_prefer_vector_width": width} if width else None


def probed_options(platform: str) -> list[dict[str, Any] | None]:
    """The compile options a compute-rate probe on `platform` tries (its rate is the
    fastest), so that no step compiled with one can run faster than its floor's probe."""
    widths = [w for w in VECTOR_WIDTHS if w] if platform in APPLIES_ON else []
    return [None, *(compiler_options(w) for w in widths)]
