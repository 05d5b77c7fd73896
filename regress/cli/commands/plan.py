"""`regress plan B H SQ SK --backend hip|cuda`: which kernels a GPU backend runs for a shape, asked of
the backend's own planner (regress.native.plan, the kernel's code built host-only)."""

from __future__ import annotations

import json
from typing import Any

import click

from regress.facts.backends import BACKENDS, resolve
from regress.facts.errors import UserError
from regress.facts.results import LAYOUTS, MASKS, ROUNDING_MODES

from . import options

_POSITIVE = click.IntRange(min=1)


def _plan_text(plan: dict[str, Any]) -> list[str]:
    grid = plan["grid"]
    lines = [
        f"{plan['kind']}  ({plan['backend']}, {plan['compute_units']} compute units)",
        f"  tiles {plan['tiles']} of {plan['block_q']} query rows, {plan['key_blocks']} key blocks of "
        f"{plan['block_k']}; grid {grid}, {plan['threads']} threads",
        f"  splits {plan['splits']}; tail split: {plan['split_tiles']} tiles x {plan['tail_splits']} parts "
        f"of {plan['blocks_per_split']} key blocks; merge {plan['merge']}",
        f"  shared memory {plan['shared_bytes']} B per block; workspace {plan['workspace_bytes']} B",
    ]
    if "runs_as" in plan:  # a GQA call seen as a dense one (kernel/common/gqa_rows.h)
        v = plan["runs_as"]
        lines.insert(
            1,
            f"  runs as B={v['batch']} H={v['heads']} Sq={v['seqlen_q']} Sk={v['seqlen_k']}: each K/V head's "
            "query heads as rows of one dense head",
        )
    for la in plan.get("launches", []):
        lines.append(f"  launch {la['role']:<5} {la['kernel']}  grid {la['grid']}")
    return lines


def _max_seqlen(text: str | None) -> tuple[int, int] | None:
    if text is None:
        return None
    try:
        q, k = (int(x) for x in text.split(","))
    except ValueError:
        raise UserError(f"--varlen {text!r}: give MAXQ,MAXK, two integers") from None
    return q, k


@click.command("plan")
@click.argument("b", type=_POSITIVE)
@click.argument("h", type=_POSITIVE)
@click.argument("sq", type=_POSITIVE)
@click.argument("sk", type=_POSITIVE)
@options.backend
@click.option(
    "--compute-units",
    type=_POSITIVE,
    default=None,
    help="CUs (hip) or SMs (cuda) of the device; default MI300X's 304, H200's 132.",
)
@click.option("--layout", type=click.Choice(LAYOUTS), default="bshd", show_default=True)
@click.option("--rounding", type=click.Choice(ROUNDING_MODES), default="rtne", show_default=True)
@click.option("--heads-kv", type=_POSITIVE, default=None, help="K/V heads (grouped-query); default H.")
@click.option("--mask", type=click.Choice(MASKS), default="none", show_default=True)
@click.option(
    "--varlen",
    "max_seqlen",
    metavar="MAXQ,MAXK",
    default=None,
    help="A varlen call: B packed sequences whose totals are SQ and SK and whose longest are MAXQ, MAXK.",
)
@click.option("--lse", is_flag=True, help="The call writes the log-sum-exp.")
@click.option("--json", "as_json", is_flag=True, help="The plan as JSON.")
def plan_cmd(
    b: int,
    h: int,
    sq: int,
    sk: int,
    backend: str,
    compute_units: int | None,
    layout: str,
    rounding: str,
    heads_kv: int | None,
    mask: str,
    max_seqlen: str | None,
    lse: bool,
    as_json: bool,
) -> None:
    """Print the launch plan for B x H heads, SQ queries, SK keys (head_dim 128), asked of the
    backend's planner (hip and hip-emu: gfx942's, cuda: sm_90a's; cpu has none). ABI v2's axes:
    --heads-kv, --mask, --varlen, --lse."""
    from regress.facts.abi import KernelError
    from regress.native.build import BuildError
    from regress.native.plan import plan_launch

    backend = BACKENDS[resolve(backend)].kernel  # whose kernel source it builds: hip-emu runs hip's
    try:
        plan = plan_launch(
            backend,
            b,
            h,
            sq,
            sk,
            compute_units=compute_units,
            layout=layout,
            rounding=rounding,
            heads_kv=heads_kv or 0,
            mask=mask,
            max_seqlen=_max_seqlen(max_seqlen),
            lse=lse,
        )
    except BuildError as e:
        raise UserError(str(e)) from None
    except KernelError as e:
        raise UserError(f"the {backend} planner refused the shape: {e}") from None
    if as_json:
        click.echo(json.dumps(plan, indent=2))
        return
    for line in _plan_text(plan):
        click.echo(line)


COMMANDS = [plan_cmd]
