"""An instruction-level emulator of the gfx942 code object (the `hip-emu` backend).

codeobject  ELF, kernel descriptors, kernarg metadata, decoded instructions tied to the bytes
fp          fp32 / bf16 / MFMA arithmetic as the ISA defines it
isa         operands and per-instruction semantics
machine     waves, workgroups, LDS, barriers, global memory, hazard checks, the trace
library     the kernel library interface (`forward`) over the emulated code object
cost        the static cost report from a launch's trace
"""

# Bumped whenever emulated semantics change: it is part of the gfx942-emu stack fingerprint.
EMU_VERSION = "hip-emu 1"
