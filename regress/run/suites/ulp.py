"""ULP: how far each output is from the exact answer, in the units the contract is written in.

Per case (shape, layout, mode, input kind), against the fp64 reference rounded once with the same
mode (regress.facts.numerics):
  plain ULP    ordered-integer distance of the bf16 patterns; max and histogram (0, 1, 2, 3, >3).
               Reported, never gated: near-zero outputs from cancellation reach ~30,000 even for
               cuDNN and FlashAttention-2 (ANCHORS.md).
  scaled ULP   |o - ref| / ulp_bf16(P·|V|): the gate (contract.toml), with p99.99 and the max per
               64-row block (all blocks stored as a sample series, the worst named in the message).
  non-finite   outputs where either side is NaN/Inf must match bit for bit after NaN
               canonicalisation; the count of mismatches is gated at zero.
The same measures for each baseline that supports the mode are extra metrics: its own scaled ULP
against fp64, and the plain ULP between kernel and baseline.

On hip-emu, the `vs_aiter` cases also run AITER v3's own bf16 forward code object on the same
emulator and inputs (regress.emu.peers.aiter; its v3 path needs seqlen_q > 128) and store, beside
the kernel's own measures: `vs_aiter:*`, the plain-ULP histogram and maximum between our output and
AITER's, their largest difference in scaled ULP, and whether the NaN/Inf positions and bit patterns
are identical; `aiter:*`, AITER's output
against the fp64 contract. Those are measurements, not gates: the case passes or fails on the
kernel's contract alone, and skips (with the reason) when the amd-aiter wheel cannot be had.

Directed rounding cases (input "rounding", regress.run.suites.rounding) add what no ULP limit can
tell apart: every output bit against the mode's own rule on an exactly known mean, canonical NaNs,
and the rounding bias (-0.5 ULP for rtz, 0 for rtne and rtna), gated by the contract's [rounding].
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from regress.emu.peers.aiter import Aiter, AiterEmu, PeerUnavailable
from regress.facts import numerics
from regress.facts.backends import BACKENDS
from regress.facts.cases import (
    HEAD_DIM,
    VARLEN_MIX_CPU,
    VARLEN_MIX_GPU,
    Shape,
    prefill_seqs,
    spec_shape,
    ulp_case,
)
from regress.facts.metrics import load_contract, percentile
from regress.facts.phases import phase
from regress.facts.results import LAYOUTS, ROUNDING_MODES, CaseResult, CaseSpec, Layout, Status
from regress.kernel import reference
from regress.kernel.baselines import varlen_baselines
from regress.machine.gpu_state import device_state
from regress.run.suites import rounding
from regress.run.suites.base import SuiteContext
from regress.run.suites.common import (
    INPUT_KINDS,
    call_bits,
    call_kwargs,
    call_reference,
    call_varlen_baseline,
    for_device,
    guarded,
    make_inputs,
    spec_layout_mode,
    synchronize,
)

NAME = "ulp"
BLOCK_ROWS = 64
WORST_BLOCKS = 3
HIST_KEYS = {">3": "gt3"}  # metric names stay identifiers

# Realistic inputs, every mode and layout. AITER's odd pairs and the H200 numerics shapes (ANCHORS.md).
CPU_SHAPES = [Shape(2, 6, 113, 203), Shape(1, 4, 512, 512), Shape(1, 2, 1023, 1024), Shape(2, 4, 256, 77)]
CPU_QUICK = [Shape(1, 2, 113, 203)]
# hip-emu (the gfx942 code object on the CPU emulator) adds its tail paths to the quick set:
# one query row (a block of one live wave), 77 keys (a partial 64-key tile), 203 rows (a partial block).
EMU_QUICK_EXTRA = [Shape(1, 1, 1, 77), Shape(1, 2, 203, 77)]
# AITER's own test pairs (batch 5, heads 6), so the kernel is held to the vendor suite's shapes too.
AITER_PAIRS = [
    (113, 203),
    (128, 217),
    (113, 211),
    (108, 256),
    (256, 512),
    (512, 256),
    (1024, 1024),
    (1023, 1024),
    (1024, 1023),
    (2048, 2048),
]
GPU_SHAPES = [
    *(Shape(5, 6, sq, sk) for sq, sk in AITER_PAIRS),
    Shape(2, 8, 1024, 1024),
    Shape(1, 4, 4096, 4096),
    Shape(1, 2, 16384, 16384),
    Shape(2, 40, 1024, 77),
    # The CUDA kernel's split over keys (kernel/cuda/split.cuh): decode at batch 1 (4 splits) and a
    # short query at small batch x heads (8 splits) go through the fp32 merge.
    Shape(1, 32, 1, 8192),
    Shape(2, 8, 64, 8192),
]
GPU_QUICK = [Shape(2, 6, 113, 203), Shape(2, 40, 1024, 77)]
# Edge cases: poisoned or extreme inputs on a small shape, and degenerate lengths with realistic inputs.
EDGE_SHAPE = Shape(1, 2, 128, 160)
EDGE_KINDS = tuple(kind for kind in INPUT_KINDS if kind not in ("realistic", rounding.INPUT))
QUICK_EDGE_KINDS = ("nan_q", "posinf_k", "neginf_v", "extreme_logits")
EDGE_LENGTH_SHAPES = {"sk1": Shape(1, 2, 64, 1), "sq1": Shape(1, 2, 1, 300)}
QUICK_EDGE_LENGTHS = ("sk1",)
# hip-emu: our output against AITER v3's emulated output (Sq > 128: AITER's v3 path), odd lengths.
PEER = "aiter-v3"
AITER_QUICK = [Shape(1, 2, 203, 77)]
AITER_SHAPES = [Shape(1, 2, 203, 77), Shape(2, 2, 300, 129), Shape(2, 1, 257, 33)]
AITER_EDGE_SHAPE = Shape(1, 1, 129, 45)
AITER_QUICK_EDGE_KINDS = ("nan_q", "posinf_k", "neginf_v", "extreme_logits")
# ABI v2 against AITER's *_causal_* (its mask is bottom-right) and *_group (varlen: every length >= 1,
# the longest query > 128) objects, GQA through its s_gqa; dense in both layouts, varlen packed.
AITER_V2_QUICK = [
    Shape(1, 4, 300, 300, hkv=2, mask="causal_bottom_right"),
    Shape.varlen(4, [(150, 150), (210, 260)], hkv=2, mask="causal_bottom_right"),
    Shape.varlen(2, [(140, 90), (200, 333)]),
]
AITER_V2_SHAPES = [*AITER_V2_QUICK, Shape(1, 2, 203, 330, mask="causal_bottom_right")]
# ABI v2's axes (masks, GQA, varlen), every mode; dense ones in both layouts, varlen packed (bshd).
# Sq != Sk so the two causal alignments differ; Sq > Sk bottom-right has rows with no visible key;
# the varlen mixes hold lengths 0 and 1. A backend without the feature skips them (RA_ERR_UNSUPPORTED).
V2_CPU_QUICK = [
    Shape(1, 4, 113, 203, hkv=2, mask="causal_bottom_right"),
    Shape(1, 2, 203, 77, mask="causal_top_left"),
    Shape.varlen(4, prefill_seqs([0, 1, 17, 64, 130]), hkv=2, mask="causal_bottom_right"),
]
V2_CPU_FULL = [
    *V2_CPU_QUICK,
    Shape(1, 2, 203, 77, mask="causal_bottom_right"),
    Shape(2, 8, 256, 256, hkv=1),
    Shape(2, 8, 1, 700, hkv=2, mask="causal_bottom_right"),  # decode against a cache
    Shape.varlen(4, [(1, 300), (0, 5), (40, 20), (1, 1), (77, 77)], hkv=1, mask="causal_bottom_right"),
    Shape.varlen(4, VARLEN_MIX_CPU, hkv=2),
]
V2_GPU_QUICK = [
    Shape(1, 32, 2048, 2048, hkv=8, mask="causal_top_left"),
    Shape.varlen(32, prefill_seqs([0, 1, 17, 64, 130, 1000]), hkv=8, mask="causal_bottom_right"),
]
V2_GPU_FULL = [
    *V2_GPU_QUICK,
    Shape(2, 8, 1023, 2048, hkv=2, mask="causal_bottom_right"),
    Shape(5, 6, 2048, 1023, mask="causal_bottom_right"),
    Shape(16, 32, 1, 8192, hkv=8, mask="causal_bottom_right"),
    Shape.varlen(
        32,
        VARLEN_MIX_GPU,
        hkv=8,
        mask="causal_bottom_right",
    ),
]
V2_EDGE_SHAPE = Shape(1, 2, 128, 160, hkv=1, mask="causal_bottom_right")


def _block_max(su: np.ndarray) -> np.ndarray:
    """[B, H, Sq, D] scaled ULP -> [B, H, ceil(Sq/64)] max per 64-row block."""
    b, h, sq, d = su.shape
    nb = -(-sq // BLOCK_ROWS)
    pad = nb * BLOCK_ROWS - sq
    if pad:
        su = np.pad(su, ((0, 0), (0, 0), (0, pad), (0, 0)))
    blocks: np.ndarray = su.reshape(b, h, nb, BLOCK_ROWS * d).max(axis=-1)
    return blocks


def compare(
    o_bits: np.ndarray,
    ref_bits: np.ndarray,
    ref: np.ndarray,
    mag: np.ndarray,
    mag_ulp: np.ndarray | None = None,
) -> dict[str, Any]:
    """Every measure of one output ([B,H,Sq,D] bf16 bit patterns) against the reference.

    Returns plain numbers plus "scaled": the per-element scaled ULP with non-finite positions as 0
    (those are judged bit for bit, by the mismatch count), for the block maxima. `mag_ulp`
    (numerics.magnitude_ulp of mag) saves recomputing it for every output of one reference.
    """
    either = numerics.is_nonfinite_bits(o_bits) | numerics.is_nonfinite_bits(ref_bits)
    mismatch = either & (numerics.canonicalize_nan(o_bits) != numerics.canonicalize_nan(ref_bits))
    finite = ~either
    dist = numerics.ulp_distance(o_bits[finite], ref_bits[finite])
    su = np.where(finite, numerics.scaled_ulp(o_bits, ref, mag, mag_ulp), 0.0)
    su_f = su[finite]
    hist = numerics.ulp_histogram(dist)
    return {
        "elements": int(o_bits.size),
        "finite_elements": int(finite.sum()),
        "nonfinite_reference": int(numerics.is_nonfinite_bits(ref_bits).sum()),
        "nonfinite_mismatches": int(mismatch.sum()),
        "plain_ulp_max": int(dist.max()) if dist.size else 0,
        **{f"plain_ulp_hist_{HIST_KEYS.get(k, k)}": v for k, v in hist.items()},
        "scaled_ulp_max": float(su_f.max()) if su_f.size else 0.0,
        "scaled_ulp_p9999": percentile(su_f, 99.99) if su_f.size else 0.0,
        "scaled_ulp_mean": float(su_f.mean()) if su_f.size else 0.0,
        "scaled": su,
    }


def _emulated(ctx: SuiteContext) -> bool:
    """The emulator's extras (its tail paths in the quick set, AITER's code object beside ours)."""
    backend = BACKENDS.get(getattr(ctx.library, "backend", ""))
    return backend is not None and backend.emulated


class UlpSuite:
    name = NAME

    def __init__(self) -> None:
        # The fp64 reference depends on (shape, input, seed, device) only, not on mode or layout;
        # cases are ordered so the six mode×layout cases of one input follow each other.
        # Per reference, also its scaled-ULP denominator and its bf16 rounding per mode: the six
        # cases and every baseline compare against the same ones (most of the compare's CPU time).
        self._ref_key: tuple[Any, ...] | None = None
        self._ref: tuple[np.ndarray, np.ndarray] | None = None
        self._mag_ulp: np.ndarray | None = None
        self._ref_bits: dict[str, np.ndarray] = {}

    def cases(self, ctx: SuiteContext) -> list[CaseSpec]:
        shapes = for_device(ctx, gpu=(GPU_QUICK, GPU_SHAPES), cpu=(CPU_QUICK, CPU_SHAPES))
        if ctx.quick and _emulated(ctx):
            shapes = [*shapes, *EMU_QUICK_EXTRA]
        specs: list[CaseSpec] = []
        for shape in shapes:
            for layout in LAYOUTS:
                for mode in ROUNDING_MODES:
                    specs.append(ulp_case(shape, layout, mode))
        kinds = QUICK_EDGE_KINDS if ctx.quick else EDGE_KINDS
        lengths = QUICK_EDGE_LENGTHS if ctx.quick else tuple(EDGE_LENGTH_SHAPES)
        modes = ("rtne",) if ctx.quick else ROUNDING_MODES
        for kind in kinds:
            for mode in modes:
                specs.append(ulp_case(EDGE_SHAPE, "bshd", mode, kind, input=kind))
        for label in lengths:
            for mode in modes:
                specs.append(ulp_case(EDGE_LENGTH_SHAPES[label], "bshd", mode, label))
        for shape in for_device(ctx, gpu=(V2_GPU_QUICK, V2_GPU_FULL), cpu=(V2_CPU_QUICK, V2_CPU_FULL)):
            for layout in LAYOUTS if shape.seqs is None else ("bshd",):
                for mode in ROUNDING_MODES:
                    specs.append(ulp_case(shape, layout, mode))
        for kind in kinds:
            specs.append(ulp_case(V2_EDGE_SHAPE, "bshd", "rtne", kind, input=kind))
        if _emulated(ctx):
            specs += _aiter_cases(ctx.quick)
        # Every mode and layout (each its own kernel variant on the GPUs), quick runs included.
        for dims in rounding.SHAPES:
            for layout in LAYOUTS:
                for mode in ROUNDING_MODES:
                    shape = Shape(*dims)
                    specs.append(ulp_case(shape, layout, mode, "rounding", input=rounding.INPUT))
        return specs

    def run_case(self, ctx: SuiteContext, spec: CaseSpec) -> CaseResult:
        return guarded(spec, lambda: self._run(ctx, spec), ctx.device)

    def _reference(
        self,
        ctx: SuiteContext,
        shape: Shape,
        kind: str,
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        layout: Layout,
    ) -> tuple[np.ndarray, np.ndarray]:
        key = (shape, kind, ctx.seed, ctx.device)
        if self._ref_key != key or self._ref is None:
            self._ref, self._mag_ulp = None, None  # free the old ones first: at 16k×16k they are large
            self._ref_bits = {}
            self._ref = call_reference(shape, q, k, v, layout, HEAD_DIM**-0.5)
            self._mag_ulp = numerics.magnitude_ulp(self._ref[1])
            self._ref_key = key
        return self._ref

    def _rounded_reference(self, ref: np.ndarray, mode: str) -> np.ndarray:
        if mode not in self._ref_bits:
            self._ref_bits[mode] = numerics.reference_bits(ref, mode)  # type: ignore[arg-type]
        return self._ref_bits[mode]

    def _run(self, ctx: SuiteContext, spec: CaseSpec) -> CaseResult:
        if spec.params.get("peer") == PEER:
            return self._run_vs_aiter(ctx, spec)
        layout, mode = spec_layout_mode(spec)
        contract = load_contract()
        limit = contract.scaled_ulp_limit(mode)
        q, k, v, ref, mag, ref_bits, out = self._kernel_against_reference(ctx, spec)
        with phase("compare"):
            o_bits = call_bits(out, spec_shape(spec), layout)
            m = compare(o_bits, ref_bits, ref, mag, self._mag_ulp)
            blocks = _block_max(m.pop("scaled"))
        metrics: dict[str, Any] = dict(m)
        metrics["block_scaled_ulp_max"] = float(blocks.max()) if blocks.size else 0.0
        metrics["scaled_ulp_limit"] = limit
        metrics["contract_version"] = contract.version
        samples = {"block_scaled_ulp_max": [round(float(x), 4) for x in blocks.ravel()]}
        notes = [_worst_blocks_text(blocks)]

        shape = spec_shape(spec)
        varlen = shape.seqs is not None
        # masked and GQA calls go to the baselines that take them; a packed varlen batch to
        # FlashAttention-2's varlen path (its output [total, H, D] compares like ours)
        baselines = (varlen_baselines(ctx.device) if ctx.baselines else []) if varlen else ctx.baselines
        if varlen and ctx.baselines and not baselines:
            notes.append("baselines not run: none takes a packed varlen batch on this device")
        kw = call_kwargs(shape, ctx.device) if varlen else {}
        for bl in baselines:
            if not bl.supports(mode):
                continue
            try:
                with phase("baseline"):
                    if varlen:
                        bo = call_varlen_baseline(bl, q, k, v, kw, mask=shape.mask, scale=HEAD_DIM**-0.5)
                    else:
                        bo = bl(q, k, v, layout=layout, rounding=mode, scale=HEAD_DIM**-0.5, mask=shape.mask)
                    synchronize(ctx.device)
            except Exception as exc:  # a broken baseline must not hide the kernel's numbers
                notes.append(f"baseline {bl.name} failed: {type(exc).__name__}: {exc}")
                continue
            with phase("compare"):
                b_bits = call_bits(bo, shape, layout)
                bm = compare(b_bits, ref_bits, ref, mag, self._mag_ulp)
            for key_ in ("scaled_ulp_max", "scaled_ulp_p9999", "plain_ulp_max", "nonfinite_mismatches"):
                metrics[f"baseline:{bl.name}:{key_}"] = bm[key_]
            both = ~(numerics.is_nonfinite_bits(o_bits) | numerics.is_nonfinite_bits(b_bits))
            with phase("compare"):
                d = numerics.ulp_distance(o_bits[both], b_bits[both])
            metrics[f"kernel_vs:{bl.name}:plain_ulp_max"] = int(d.max()) if d.size else 0
            metrics[f"kernel_vs:{bl.name}:frac_gt1"] = float((d > 1).mean()) if d.size else 0.0

        failures = []
        if spec.params.get("input", "realistic") == rounding.INPUT:
            failures += _rounding_checks(o_bits, v, layout, mode, spec, ctx.seed, metrics)
        if metrics["scaled_ulp_max"] > limit:
            failures.append(f"scaled ULP max {metrics['scaled_ulp_max']:.3f} > {limit} ({mode})")
        if metrics["nonfinite_mismatches"] > contract.nonfinite_mismatch_max:
            failures.append(f"{metrics['nonfinite_mismatches']} non-finite outputs differ from the reference")
        status: Status = "fail" if failures else "pass"
        return CaseResult(
            case=spec,
            status=status,
            metrics=metrics,
            samples=samples,
            message="; ".join(failures + notes),
            device=device_state(ctx.device),
        )

    def _kernel_against_reference(self, ctx: SuiteContext, spec: CaseSpec) -> tuple[Any, ...]:
        """A case's inputs, its fp64 reference (with magnitudes and the rounded bits) and the kernel's
        output: what the contract measures and the comparison with AITER both start from."""
        shape = spec_shape(spec)
        layout, mode = spec_layout_mode(spec)
        kind = str(spec.params.get("input", "realistic"))
        # ANCHORS.md: realistic inputs use seed 42 itself, so our numbers compare with theirs.
        with phase("inputs"):
            q, k, v = make_inputs(shape, layout, seed=ctx.seed, device=ctx.device, kind=kind)
        with phase("reference"):
            ref, mag = self._reference(ctx, shape, kind, q, k, v, layout)
            ref_bits = self._rounded_reference(ref, mode)
        with phase("kernel"):
            out = ctx.library.forward(
                q, k, v, layout=layout, rounding=mode, scale=HEAD_DIM**-0.5, **call_kwargs(shape, ctx.device)
            )
            synchronize(ctx.device)
        return q, k, v, ref, mag, ref_bits, out

    def _run_vs_aiter(self, ctx: SuiteContext, spec: CaseSpec) -> CaseResult:
        """Our output and AITER v3's (its code object on the same emulator), on the same inputs."""
        try:
            peer = _aiter_emu()
        except PeerUnavailable as exc:
            return CaseResult(case=spec, status="skip", message=f"AITER v3 not run: {exc}")
        layout, mode = spec_layout_mode(spec)
        contract = load_contract()
        limit = contract.scaled_ulp_limit(mode)
        q, k, v, ref, mag, ref_bits, out = self._kernel_against_reference(ctx, spec)
        shape = spec_shape(spec)
        with phase("baseline"):
            theirs = _aiter_call(peer, shape, q, k, v, layout, mode)
        with phase("compare"):
            o_bits = call_bits(out, shape, layout)
            a_bits = call_bits(theirs, shape, layout)
            m = compare(o_bits, ref_bits, ref, mag, self._mag_ulp)
            am = compare(a_bits, ref_bits, ref, mag, self._mag_ulp)
            vs = compare_bits(o_bits, a_bits)
            # The same difference in the contract's unit, ulp_bf16(P·|V|): near-zero outputs (cancellation)
            # make the plain ULP huge while the two differ by a fraction of the row's scale.
            both = ~(numerics.is_nonfinite_bits(o_bits) | numerics.is_nonfinite_bits(a_bits))
            gap = np.abs(numerics.bf16_bits_to_f64(o_bits[both]) - numerics.bf16_bits_to_f64(a_bits[both]))
            mag_ulp = self._mag_ulp if self._mag_ulp is not None else numerics.magnitude_ulp(mag)
            den = mag_ulp[both]
            ok = den > 0  # a non-finite magnitude has no scale: those rows are judged bit for bit
            vs["scaled_ulp_max"] = float((gap[ok] / den[ok]).max()) if ok.any() else 0.0
        m.pop("scaled")
        metrics: dict[str, Any] = dict(m)
        metrics["scaled_ulp_limit"] = limit
        metrics["contract_version"] = contract.version
        metrics.update({f"vs_aiter:{key}": val for key, val in vs.items()})
        for key in ("scaled_ulp_max", "scaled_ulp_p9999", "plain_ulp_max", "nonfinite_mismatches"):
            metrics[f"aiter:{key}"] = am[key]
        aiter_ok = (
            am["scaled_ulp_max"] <= limit and am["nonfinite_mismatches"] <= contract.nonfinite_mismatch_max
        )
        metrics["aiter:meets_contract"] = int(aiter_ok)
        metrics["aiter:mfma_hazards"] = sum(h.kind == "mfma" for h in peer.last_hazards)
        same_pos = "identical" if vs["nonfinite_positions_identical"] else "differ"
        same_bits = "identical" if vs["nonfinite_bits_identical"] else "differ"
        aiter_note = f"AITER vs fp64: scaled ULP max {am['scaled_ulp_max']:.3f}"
        if not aiter_ok:
            aiter_note += (
                f" (misses the contract: limit {limit}, {am['nonfinite_mismatches']} non-finite mismatches)"
            )
        notes = [
            f"AITER v3 from {peer.aiter.wheel.name}",
            f"vs AITER v3: plain ULP max {vs['plain_ulp_max']}, {vs['frac_le1']:.4%} within 1 ULP, "
            f"scaled ULP max {vs['scaled_ulp_max']:.3f}, "
            f"NaN/Inf positions {same_pos}, bits {same_bits}",
            aiter_note,
        ]
        failures = []
        if metrics["scaled_ulp_max"] > limit:
            failures.append(f"scaled ULP max {metrics['scaled_ulp_max']:.3f} > {limit} ({mode})")
        if metrics["nonfinite_mismatches"] > contract.nonfinite_mismatch_max:
            failures.append(f"{metrics['nonfinite_mismatches']} non-finite outputs differ from the reference")
        return CaseResult(
            case=spec,
            status="fail" if failures else "pass",
            metrics=metrics,
            message="; ".join(failures + notes),
            device=device_state(ctx.device),
        )


def compare_bits(o_bits: np.ndarray, p_bits: np.ndarray) -> dict[str, Any]:
    """Our bf16 output against a peer's, element by element: the plain-ULP histogram and maximum over
    the positions where both are finite, and whether the non-finite positions and their bit patterns
    (no NaN canonicalisation) are identical."""
    o_nf, p_nf = numerics.is_nonfinite_bits(o_bits), numerics.is_nonfinite_bits(p_bits)
    both = ~(o_nf | p_nf)
    dist = numerics.ulp_distance(o_bits[both], p_bits[both])
    hist = numerics.ulp_histogram(dist)
    either = o_nf | p_nf
    return {
        "plain_ulp_max": int(dist.max()) if dist.size else 0,
        **{f"plain_ulp_hist_{HIST_KEYS.get(k, k)}": val for k, val in hist.items()},
        "frac_le1": float((dist <= 1).mean()) if dist.size else 1.0,
        "nonfinite": int(o_nf.sum()),
        "peer_nonfinite": int(p_nf.sum()),
        "nonfinite_positions_identical": int(bool((o_nf == p_nf).all())),
        "nonfinite_bits_identical": int(bool((o_bits[either] == p_bits[either]).all())),
    }


def _aiter_cases(quick: bool) -> list[CaseSpec]:
    shapes = AITER_QUICK if quick else AITER_SHAPES
    specs = [
        ulp_case(shape, layout, mode, "vs_aiter", peer=PEER)
        for shape in shapes
        for layout in LAYOUTS
        for mode in ROUNDING_MODES
    ]
    specs += [
        ulp_case(shape, layout, mode, "vs_aiter", peer=PEER)
        for shape in (AITER_V2_QUICK if quick else AITER_V2_SHAPES)
        for layout in (LAYOUTS if shape.seqs is None else ("bshd",))
        for mode in ROUNDING_MODES
    ]
    kinds = AITER_QUICK_EDGE_KINDS if quick else EDGE_KINDS
    modes = ("rtne",) if quick else ROUNDING_MODES
    for kind in kinds:
        for mode in modes:
            specs.append(ulp_case(AITER_EDGE_SHAPE, "bshd", mode, kind, "vs_aiter", input=kind, peer=PEER))
    return specs


def _aiter_call(
    peer: Any, shape: Shape, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, layout: Layout, mode: str
) -> torch.Tensor:
    """AITER v3's output for a case: its plain, *_causal_* (bottom-right) or *_group (varlen, rows
    packed as (1, total, H, D)) object, GQA through s_gqa; the varlen output as ours, [total, H, D]."""
    causal = shape.mask == "causal_bottom_right"
    if shape.mask not in ("none", "causal_bottom_right"):
        raise ValueError(f"AITER v3 has no {shape.mask} object")
    if shape.seqs is None:
        return peer.forward(q, k, v, layout=layout, rounding=mode, scale=HEAD_DIM**-0.5, causal=causal)  # type: ignore[no-any-return]
    kw = call_kwargs(shape, "cpu")
    out = peer.forward(
        q[None], k[None], v[None], rounding=mode, scale=HEAD_DIM**-0.5, causal=causal,
        cu_seqlens_q=kw["cu_seqlens_q"], cu_seqlens_k=kw["cu_seqlens_k"],
    )  # fmt: skip
    return out[0]  # type: ignore[no-any-return]


_AITER: list[Any] = []  # [AiterEmu] or [PeerUnavailable]: loaded (or refused) once per process


def _aiter_emu() -> Any:
    if not _AITER:
        try:
            _AITER.append(AiterEmu(Aiter.load()))
        except PeerUnavailable as exc:
            _AITER.append(exc)
    if isinstance(_AITER[0], PeerUnavailable):
        raise _AITER[0]
    return _AITER[0]


def _rounding_checks(
    o_bits: np.ndarray,
    v: torch.Tensor,
    layout: Layout,
    mode: str,
    spec: CaseSpec,
    seed: int,
    metrics: dict[str, Any],
) -> list[str]:
    """The directed case's bit-for-bit and bias gates; their measures go into `metrics`."""
    contract = load_contract()
    shape = spec_shape(spec)
    _, labels = rounding.directed_v(shape.b, shape.h, shape.sk, seed)
    r = rounding.check(o_bits, reference.to_bhsd_bits(v, layout), mode, labels)  # type: ignore[arg-type]
    worst = r.pop("worst")
    lo, hi = contract.rounding_bias_band(mode)
    metrics.update(r)
    metrics["bias_ulp_band"] = [lo, hi]
    failures = []
    if r["rule_mismatches"] > contract.rounding_mismatch_max:
        failures.append(
            f"{r['rule_mismatches']} of {r['rule_checked']} outputs break the {mode} rule"
            f" ({'; '.join(worst) or 'random means only'})"
        )
    if r["nan_noncanonical"]:
        failures.append(f"{r['nan_noncanonical']} NaN outputs are not the canonical 0x7FFF")
    if not lo <= r["bias_ulp"] <= hi:
        failures.append(f"rounding bias {r['bias_ulp']:+.3f} ULP outside [{lo:+.2f}, {hi:+.2f}] ({mode})")
    return failures


def _worst_blocks_text(blocks: np.ndarray) -> str:
    if blocks.size == 0:
        return ""
    flat = blocks.ravel()
    idx = np.argsort(-flat, kind="stable")[:WORST_BLOCKS]
    _, h, nb = blocks.shape
    parts = []
    for i in idx.tolist():
        val = float(flat[i])
        bi, rest = divmod(i, h * nb)
        hi, blk = divmod(rest, nb)
        parts.append(f"b{bi} h{hi} rows {blk * BLOCK_ROWS}-{blk * BLOCK_ROWS + BLOCK_ROWS - 1}: {val:.3f}")
    return "worst blocks (scaled ULP): " + ", ".join(parts)
