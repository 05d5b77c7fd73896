"""regress: the nightly proof that a bf16 flash-attention kernel stays fast, exact and deterministic."""

__version__ = "0.1.0"
