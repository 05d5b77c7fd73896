"""`regress build`: compile the kernel the one authoritative way and print its record."""

from __future__ import annotations

import json
from pathlib import Path

import click

from regress.facts.errors import UserError
from regress.facts.escape import readable
from regress.machine.pins import load_pin
from regress.native.build import BuildError, build_kernel
from regress.run.runner import parse_inject, resolve_backend

from . import options


@click.command()
@options.backend
@click.option("--stack", "stack_name", help="Pinned stack whose build flags to use.")
@options.compile_only
@options.inject
@click.option("--cache-dir", type=click.Path(path_type=Path), help="Build cache (default ./.regress/build).")
@click.option("--json", "as_json", is_flag=True)
def build(
    backend: str,
    stack_name: str | None,
    compile_only: bool,
    inject: tuple[str, ...],
    cache_dir: Path | None,
    as_json: bool,
) -> None:
    """Build the kernel library (cached by source, flags and compiler) and print its build record."""
    pin = load_pin(stack_name) if stack_name else None
    chosen = pin.backend if pin and backend == "auto" else resolve_backend(backend)
    try:
        artifact = build_kernel(
            chosen,
            extra_flags=pin.extra_flags if pin else (),
            inject=parse_inject(inject),
            compile_only=compile_only,
            cache_dir=cache_dir,
        )
    except BuildError as exc:
        raise UserError(str(exc)) from exc
    record = artifact.to_dict()
    if as_json:
        click.echo(json.dumps(record, indent=2, sort_keys=True))
        return
    click.echo(f"{chosen} kernel {'(cached) ' if artifact.cached else ''}→ {artifact.path}")
    for key in ("source_hash", "git_commit", "artifact_hash", "compiler_version", "inject", "stats"):
        value = record[key]
        click.echo(f"  {key}: {json.dumps(value) if isinstance(value, dict | list) else readable(value)}")


COMMANDS = [build]
