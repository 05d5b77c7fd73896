"""Options several commands take are declared once (regress/cli/commands/options.py): every `--db` reads
the same way, and $REGRESS_DATABASE_URL reaches a command through the store's one resolver."""

from __future__ import annotations

from pathlib import Path

import click
import pytest

from regress.cli import cli, main
from regress.store.repo import open_store


def _commands(group: click.Group, path: str = "regress") -> list[tuple[str, click.Command]]:
    found: list[tuple[str, click.Command]] = []
    for name in group.list_commands(click.Context(group)):
        sub = group.get_command(click.Context(group), name)
        assert sub is not None
        if isinstance(sub, click.Group):
            found.extend(_commands(sub, f"{path} {name}"))
        else:
            found.append((f"{path} {name}", sub))
    return found


def _option(command: click.Command, flag: str) -> click.Option | None:
    return next((p for p in command.params if isinstance(p, click.Option) and flag in p.opts), None)


@pytest.mark.parametrize("flag", ["--db", "--backend", "--compile-only", "--inject"])
def test_a_shared_option_reads_the_same_in_every_command(flag: str) -> None:
    declared = {name: opt for name, cmd in _commands(cli) if (opt := _option(cmd, flag)) is not None}
    assert len(declared) >= 2, f"{flag} is shared by fewer than two commands: {sorted(declared)}"
    shapes = {(o.name, o.help, o.metavar, str(o.type), o.default, o.envvar) for o in declared.values()}
    assert len(shapes) == 1, f"{flag} differs between {sorted(declared)}: {shapes}"


def test_the_database_url_comes_from_the_environment_without_db(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    url = f"sqlite:///{tmp_path / 'env.db'}"
    open_store(url).engine.dispose()
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("REGRESS_DATABASE_URL", url)
    assert main(["runs", "list"]) == 0  # the default ./.regress/regress.db does not exist here
    monkeypatch.delenv("REGRESS_DATABASE_URL")
    assert main(["runs", "list"]) == 2
    assert "regress.db" in capsys.readouterr().err
