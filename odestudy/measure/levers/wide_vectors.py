"""The step compiled with 512-bit vectors (`vectors.py`), a compile option of its own."""

from typing import Any, ClassVar

from ..lever import AbstractLever
from ..vectors import RECOMMENDED_WIDTH


class WideVectors(AbstractLever):
    """`vector_width=512`: XLA's CPU compiler's option (the CPU only); measured faster
    on the recommended PID step (`results/<machine>/levers/cpu-pid.json`)."""

    name: ClassVar[str] = "wide_vectors"
    fused_loop: ClassVar[bool] = True
    help: ClassVar[str] = "the step compiled with 512-bit vectors (CPU)"
    faster_on: ClassVar[tuple[str, ...] | None] = ("cpu",)
    devices: ClassVar[tuple[str, ...] | None] = ("cpu",)
    sets: ClassVar[dict[str, Any]] = {"vector_width": RECOMMENDED_WIDTH}
