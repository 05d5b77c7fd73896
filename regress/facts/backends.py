"""What each kernel backend is, in one table: the device its suites run on, the GPU it needs, the
build recipe it uses (with and without `--compile-only`), and whether it has a clock worth timing.

The CLI's `--backend` choices, auto-detection, the nightly's device check, the build, the stack
fingerprint and the suite planning all read this table instead of restating its facts. Pure: the
one probe, `torch_gpu_backend`, imports torch lazily and only when called.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Backend:
    name: str
    device: str  # the torch device kind the suites run on: "cpu" or "cuda" (ROCm torch says cuda too)
    gpu: str | None  # the GPU torch must see ("NVIDIA", "AMD"), None when it runs on the CPU
    kernel: str  # whose kernel source it builds (the build cache's prefix)
    recipe: str  # the build recipe (`build.COMMANDS` key)
    compile_only_recipe: str  # the recipe of `--compile-only`: CPU and CUDA need no device to compile
    always_compile_only: bool  # builds the device-free object whatever the flag says
    clock: bool  # timed suites run on it (the emulator has no clock worth timing)
    no_gpu_hint: str = ""  # what still works here when its GPU is absent
    emulated: bool = False  # the gfx942 code object on the CPU emulator: peers' code objects run beside it

    def recipe_for(self, compile_only: bool) -> str:
        return self.compile_only_recipe if compile_only or self.always_compile_only else self.recipe

    def compiles_only(self, compile_only: bool) -> bool:
        return compile_only or self.always_compile_only


BACKENDS: dict[str, Backend] = {
    b.name: b
    for b in (
        Backend("cpu", "cpu", None, "cpu", "cpu", "cpu", False, True),
        Backend(
            "cuda",
            "cuda",
            "NVIDIA",
            "cuda",
            "cuda",
            "cuda",
            False,
            True,
            "`regress build --backend cuda` still checks that the sm_90a kernel compiles (nvcc)",
        ),
        Backend(
            "hip",
            "cuda",
            "AMD",
            "hip",
            "hip",
            "hip-compile-only",
            False,
            True,
            "`regress build --backend hip --compile-only` still checks the gfx942 code object",
        ),
        # The compile-only gfx942 code object on the CPU emulator (regress/emu): the same recipe and
        # cache entry as `regress build --backend hip --compile-only`.
        Backend(
            "hip-emu", "cpu", None, "hip", "hip-compile-only", "hip-compile-only", True, False, emulated=True
        ),
    )
}
NAMES: tuple[str, ...] = tuple(BACKENDS)
AUTO = "auto"
CHOICES: tuple[str, ...] = (AUTO, *NAMES)  # what --backend accepts


def gpu_backend(hip_version: str | None) -> str:
    """The backend of a GPU torch sees: ROCm torch (torch.version.hip set) drives hip, else cuda."""
    return "hip" if hip_version else "cuda"


def torch_gpu_backend() -> str | None:
    """The backend of the GPU this torch sees, None without one: the one place torch is asked which
    vendor it was built for."""
    # torch is a dependency: a broken install fails here, loudly, rather than falling back to cpu.
    import torch

    if not torch.cuda.is_available():
        return None
    return gpu_backend(getattr(torch.version, "hip", None))


def resolve(name: str) -> str:
    """auto → hip on an AMD GPU, cuda on an NVIDIA GPU, else cpu; a named backend as it is.
    Raises ValueError for a name the table does not know."""
    if name in BACKENDS:
        return name
    if name != AUTO:
        raise ValueError(f"unknown backend {name!r}; expected one of {', '.join(CHOICES)}")
    return torch_gpu_backend() or "cpu"
