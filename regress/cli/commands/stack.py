"""`regress stack show|pin|check`: the live fingerprint and the pinned stacks."""

from __future__ import annotations

import json
from pathlib import Path

import click

from regress.facts.errors import EXIT_OK, EXIT_UNDECIDED
from regress.facts.escape import readable
from regress.facts.stack_keys import HASHED_KEYS
from regress.machine.pins import check_pin, format_drift, load_pin, write_pin
from regress.machine.stack import live_fingerprint
from regress.run.runner import resolve_backend

from . import options

_stacks_dir = click.option(
    "--stacks-dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="Folder of your own pins (default: $REGRESS_STACKS_DIR, else the checkout's runners/stacks/); "
    "the shipped pins are searched after it.",
)


@click.group()
def stack() -> None:
    """Stack fingerprints: show the live one, pin it, check the machine against a pin."""


@stack.command()
@options.backend
@options.compile_only
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
def show(backend: str, compile_only: bool, as_json: bool) -> None:
    """Print the live fingerprint and its digest."""
    fp = live_fingerprint(resolve_backend(backend), compile_only=compile_only)
    if as_json:
        click.echo(json.dumps(fp.to_dict(), indent=2, sort_keys=True))
        return
    click.echo(f"digest  {fp.digest}  (schema {fp.schema_version})")
    width = max(map(len, fp.keys))
    for key, value in fp.keys.items():
        click.echo(f"  {key:<{width}}  {'*' if key in HASHED_KEYS else ' '} {readable(value)}")
    click.echo("  (* = part of the digest)")


@stack.command()
@click.argument("name")
@options.backend
@options.compile_only
@click.option("--description", default="", help="One line stored in the pin.")
@click.option("--image", default="", help="Container image tag the stack runs in.")
@click.option("--image-digest", default="", help="Container image digest (sha256:...).")
@click.option("--force", is_flag=True, help="Replace an existing pin.")
@_stacks_dir
def pin(
    name: str,
    backend: str,
    compile_only: bool,
    description: str,
    image: str,
    image_digest: str,
    force: bool,
    stacks_dir: Path | None,
) -> None:
    """Write NAME.toml from the live environment into your stacks folder."""
    fp = live_fingerprint(resolve_backend(backend), compile_only=compile_only)
    container = {"image": image, "digest": image_digest} if image or image_digest else None
    path = write_pin(
        name, fp, description=description, container=container, overwrite=force, stacks_dir=stacks_dir
    )
    click.echo(f"pinned {name} → {path} (digest {fp.digest[:16]})")


@stack.command()
@click.argument("name")
@options.compile_only
@_stacks_dir
@click.pass_context
def check(ctx: click.Context, name: str, compile_only: bool, stacks_dir: Path | None) -> None:
    """Exit 0 if this machine matches pin NAME, 2 with a key-by-key diff if it drifted."""
    pinned = load_pin(name, stacks_dir)
    fp = live_fingerprint(pinned.backend, compile_only=compile_only, extra_flags=pinned.extra_flags)
    drifts = check_pin(pinned, fp)
    if drifts:
        click.echo(format_drift(pinned, drifts), err=True)
        ctx.exit(EXIT_UNDECIDED)
    click.echo(f"stack {pinned.name} matches (digest {fp.digest[:16]})")
    ctx.exit(EXIT_OK)


COMMANDS = [stack]
