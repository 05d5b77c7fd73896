"""Determinism: the same inputs give the same output bits on every launch, stream and process.

Variants (param "variant"):
  repeat       N launches back to back on one set of fresh seeded inputs
  interleaved  a matmul between launches, so caches, clocks and allocator state move
  stream       launches alternate between the default and a second CUDA stream (GPU only)
  process      a second Python process rebuilds the inputs from the seed and reports its hash

Every launch writes into a buffer pre-filled with a different garbage pattern, so a kernel that
leaves elements unwritten shows up as a difference instead of reading as stable.
"""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import dataclass, field

import torch

from regress.facts.cases import VARLEN_MIX_GPU, Shape, determinism_case, prefill_seqs, spec_shape
from regress.facts.phases import phase
from regress.facts.results import LAYOUTS, ROUNDING_MODES, CaseResult, CaseSpec
from regress.machine.gpu_state import device_state
from regress.run.suites.base import SuiteContext
from regress.run.suites.common import (
    bits,
    call_kwargs,
    derive_seed,
    for_device,
    guarded,
    make_inputs,
    output_like,
    sha256_bits,
    spec_layout_mode,
    synchronize,
)
from regress.run.suites.contract import load_contract

NAME = "determinism"
VARIANTS = ("repeat", "interleaved", "stream", "process")

CPU_SHAPES = [Shape(1, 2, 256, 256), Shape(1, 2, 113, 203)]
CPU_QUICK = [Shape(1, 1, 64, 64)]
# (1,32,1,8192): decode at batch 1, which the CUDA kernel splits over keys (a second, merging launch).
GPU_SHAPES = [
    Shape(2, 8, 1024, 1024),
    Shape(2, 6, 113, 203),
    Shape(1, 4, 4096, 4096),
    Shape(2, 40, 1024, 77),
    Shape(1, 32, 1, 8192),
]
GPU_QUICK = [Shape(2, 8, 1024, 1024)]
# ABI v2's axes: causal with GQA (rows without keys: bottom-right with Sq > Sk) and a varlen mix with
# lengths 0 and 1, every mode, the repeat variant (and interleaved on the GPU).
V2_CPU = [
    Shape(1, 4, 130, 70, hkv=2, mask="causal_bottom_right"),
    Shape.varlen(4, prefill_seqs([0, 1, 33, 100]), hkv=1, mask="causal_bottom_right"),
]
V2_GPU = [
    Shape(1, 32, 2048, 2048, hkv=8, mask="causal_top_left"),
    Shape.varlen(
        32,
        VARLEN_MIX_GPU,
        hkv=8,
        mask="causal_bottom_right",
    ),
]
# The extra variants (interleaved, stream, process) run on this shape only: they test the
# launch environment, not the shape.
WORKER_TIMEOUT_S = 600


def default_launches(ctx: SuiteContext) -> int:
    if ctx.is_gpu:
        return 10 if ctx.quick else 100
    return 4 if ctx.quick else 10


@dataclass
class _Tally:
    """Hashes and differing elements of a series of launches against the first."""

    first: torch.Tensor | None = None
    first_hash: str = ""
    launches: int = 0
    differing_elements: int = 0
    differing_launches: int = 0
    hashes: set[str] = field(default_factory=set)

    def add(self, out: torch.Tensor) -> None:
        b = bits(out)
        self.launches += 1
        if self.first is None:
            self.first = b.clone()
            self.first_hash = sha256_bits(out)
            self.hashes.add(self.first_hash)
            return
        # Bit-identical outputs have the same sha256, so hash only the ones that differ: saves
        # copying every output to the host (100 MB per launch at the large GPU shapes).
        diff = int((b != self.first).sum().item())
        if diff:
            self.differing_elements = max(self.differing_elements, diff)
            self.differing_launches += 1
            self.hashes.add(sha256_bits(out))

    def add_foreign(self, digest: str, out: torch.Tensor | None) -> None:
        """A result from elsewhere (another process): its hash, and its bits when available."""
        self.launches += 1
        self.hashes.add(digest)
        if digest != self.first_hash:
            self.differing_launches += 1
            if out is not None and self.first is not None:
                diff = int((bits(out).to(self.first.device) != self.first).sum().item())
                self.differing_elements = max(self.differing_elements, diff)


def _garbage_fill(out: torch.Tensor, i: int) -> None:
    # Alternate NaN-ish and zero patterns: an unwritten element then differs between launches.
    out.view(torch.int16).fill_(0x7FC1 if i % 2 else 0)


class DeterminismSuite:
    name = NAME

    def cases(self, ctx: SuiteContext) -> list[CaseSpec]:
        shapes = for_device(ctx, gpu=(GPU_QUICK, GPU_SHAPES), cpu=(CPU_QUICK, CPU_SHAPES))
        specs: list[CaseSpec] = []
        for shape in shapes:
            for layout in LAYOUTS:
                for mode in ROUNDING_MODES:
                    specs.append(determinism_case(shape, layout, mode))
        extra = [v for v in VARIANTS[1:] if ctx.is_gpu or v != "stream"]
        # Quick: the extra variants once (rtne, bshd); full: every mode, bshd.
        modes = ("rtne",) if ctx.quick else ROUNDING_MODES
        for variant in extra:
            for mode in modes:
                specs.append(determinism_case(shapes[0], "bshd", mode, variant))
        for shape in V2_GPU if ctx.is_gpu else V2_CPU:
            for mode in ROUNDING_MODES:
                specs.append(determinism_case(shape, "bshd", mode))
            if ctx.is_gpu:
                specs.append(determinism_case(shape, "bshd", "rtne", "interleaved"))
        return specs

    def run_case(self, ctx: SuiteContext, spec: CaseSpec) -> CaseResult:
        return guarded(spec, lambda: self._run(ctx, spec), ctx.device)

    def _run(self, ctx: SuiteContext, spec: CaseSpec) -> CaseResult:
        p = spec.params
        shape = spec_shape(spec)
        variant = str(p.get("variant", "repeat"))
        layout, mode = spec_layout_mode(spec)
        kind = str(p.get("input", "realistic"))
        seed = derive_seed(ctx.seed, NAME, shape.dims(), kind)
        n = default_launches(ctx)
        with phase("inputs"):
            q, k, v = make_inputs(shape, layout, seed=seed, device=ctx.device, kind=kind)
        tally = _Tally()
        dev_before = device_state(ctx.device)
        out = output_like(q)
        v2 = call_kwargs(shape, ctx.device)
        if v2 and variant == "process":
            raise ValueError("the process variant's worker takes dense cases only")

        def launch(i: int, stream: int | None = None) -> None:
            _garbage_fill(out, i)
            ctx.library.forward(q, k, v, layout=layout, rounding=mode, out=out, stream=stream, **v2)

        # The launches and their waits: a hung kernel is seen here (issue 23: the H200 drill named
        # "inputs", the last step entered before them).
        with phase("kernel"):
            if variant == "repeat":
                for i in range(n):
                    launch(i)
                    synchronize(ctx.device)
                    tally.add(out)
            elif variant == "interleaved":
                g = torch.Generator(device=ctx.device)
                g.manual_seed(seed)
                side = 1024 if ctx.is_gpu else 256
                a = torch.randn((side, side), generator=g, device=ctx.device, dtype=torch.bfloat16)
                for i in range(n):
                    launch(i)
                    a = torch.tanh(a @ a)  # other work between launches, dependent so it is not elided
                    synchronize(ctx.device)
                    tally.add(out)
            elif variant == "stream":
                if not ctx.is_gpu:
                    return CaseResult(case=spec, status="skip", message="second stream needs a GPU")
                side_stream = torch.cuda.Stream()
                for i in range(n):
                    if i % 2:
                        side_stream.wait_stream(torch.cuda.current_stream())
                        with torch.cuda.stream(side_stream):
                            launch(i, stream=side_stream.cuda_stream)
                        torch.cuda.current_stream().wait_stream(side_stream)
                    else:
                        launch(i, stream=torch.cuda.current_stream().cuda_stream)
                    synchronize(ctx.device)
                    tally.add(out)
            elif variant == "process":
                launch(0)
                synchronize(ctx.device)
                tally.add(out)
                with phase("process"):  # a fresh interpreter: its start-up is most of this case
                    digest, foreign = _run_worker(ctx, shape, layout, mode, kind, seed, launches=2)
                for d in digest:
                    tally.add_foreign(d, foreign)
            else:
                raise ValueError(f"unknown determinism variant {variant!r}")

        contract = load_contract()
        distinct = len(tally.hashes)
        ok = distinct <= contract.distinct_hashes_max
        metrics = {
            "launches": tally.launches,
            "distinct_hashes": distinct,
            "differing_elements": tally.differing_elements,
            "differing_launches": tally.differing_launches,
            "elements": q.numel(),
            "seed": seed,
            "contract_version": contract.version,
        }
        msg = (
            ""
            if ok
            else (
                f"{distinct} distinct output hashes over {tally.launches} launches ({variant}); "
                f"up to {tally.differing_elements} elements differ from the first launch"
            )
        )
        return CaseResult(
            case=spec,
            status="pass" if ok else "fail",
            metrics=metrics,
            message=msg,
            device={"before": dev_before, "after": device_state(ctx.device), "first_hash": tally.first_hash},
        )


def _run_worker(
    ctx: SuiteContext, shape: Shape, layout: str, mode: str, kind: str, seed: int, launches: int
) -> tuple[list[str], torch.Tensor | None]:
    """Runs determinism_worker in a fresh interpreter; returns its hashes and its last output."""
    import tempfile
    from pathlib import Path

    with tempfile.TemporaryDirectory(prefix="regress-det-") as tmp:
        out_path = Path(tmp) / "out.bin"
        cmd = [
            sys.executable,
            "-m",
            "regress.run.suites.determinism_worker",
            "--lib",
            str(ctx.library.path),
            "--device",
            ctx.device,
            "--seed",
            str(seed),
            "--shape",
            shape.dims(),
            "--layout",
            layout,
            "--mode",
            mode,
            "--input",
            kind,
            "--launches",
            str(launches),
            "--out",
            str(out_path),
        ]
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=WORKER_TIMEOUT_S, check=False)
        if proc.returncode != 0:
            raise RuntimeError(f"determinism worker exited {proc.returncode}: {proc.stderr.strip()[-800:]}")
        last = proc.stdout.strip().splitlines()[-1]
        report = json.loads(last)
        foreign = None
        if out_path.exists():
            raw = torch.frombuffer(bytearray(out_path.read_bytes()), dtype=torch.int16)
            foreign = raw.view(torch.bfloat16)
        return [str(h) for h in report["hashes"]], foreign
