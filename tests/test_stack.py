"""Stack fingerprints and pins: stable digest, a clean check, and a readable diff on drift."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from committed import headline

from regress.cli import main
from regress.facts.stack_keys import HASHED_KEYS, PINNED_KEYS
from regress.machine.pins import load_pin
from regress.machine.stack import live_fingerprint


@pytest.fixture
def stacks_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("REGRESS_STACKS_DIR", str(tmp_path))
    return tmp_path


def test_digest_covers_only_history_breaking_keys() -> None:
    fp = live_fingerprint("cpu")
    assert set(HASHED_KEYS) | set(PINNED_KEYS) == set(fp.keys)
    before = fp.digest
    fp.keys["torch"] = "0.0.0"  # pinned, not hashed
    assert fp.digest == before
    fp.keys["compiler"] = "g++ 99"
    assert fp.digest != before
    assert live_fingerprint("cpu").digest == before  # stable across reads


def test_pin_then_check_passes(stacks_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["stack", "pin", "here", "--backend", "cpu"]) == 0
    assert load_pin("here").digest == live_fingerprint("cpu").digest
    assert main(["stack", "check", "here"]) == 0
    assert "matches" in capsys.readouterr().out


def test_tampered_pin_exits_2_with_the_diff(stacks_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["stack", "pin", "here", "--backend", "cpu"]) == 0
    path = stacks_dir / "here.toml"
    path.write_text(path.read_text().replace('compiler = "', 'compiler = "tampered '))
    assert main(["stack", "check", "here"]) == 2
    err = capsys.readouterr().err
    assert "compiler" in err and "[digest]" in err and "tampered" in err


def test_unknown_and_broken_pins_are_clear_errors(
    stacks_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["stack", "check", "nope"]) == 2
    assert "no pinned stack 'nope'" in capsys.readouterr().err
    (stacks_dir / "bad.toml").write_text("[stack\n")
    assert main(["stack", "check", "bad"]) == 2
    assert "not valid TOML" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("edit", "said"),
    [
        (("schema_version = 1", 'schema_version = "one"'), "schema_version 'one'"),
        (("schema_version = 1", "schema_version = true"), "schema_version True"),
        (("extra_flags = []", 'extra_flags = "-O0"'), "extra_flags must be a list"),
        (("[stack]", 'container = ["x"]\n[stack]'), "must be tables"),
    ],
)
def test_a_malformed_pin_is_a_clear_error_and_imports_go_on(
    stacks_dir: Path, capsys: pytest.CaptureFixture[str], edit: tuple[str, str], said: str
) -> None:
    """A pin with a value of the wrong type raised ValueError or AttributeError: `stack check` and
    every `regress import` (which indexes the pins by digest and skips broken ones) crashed."""
    assert main(["stack", "pin", "here", "--backend", "cpu"]) == 0
    path = stacks_dir / "here.toml"
    assert edit[0] in path.read_text()
    path.write_text(path.read_text().replace(edit[0], edit[1], 1))
    assert main(["stack", "check", "here"]) == 2
    assert said in capsys.readouterr().err
    bundle = headline()[0]
    assert main(["import", str(bundle), "--db", f"sqlite:///{stacks_dir / 'r.db'}"]) == 0


def test_shipped_pins_load() -> None:
    for name in ("cpu-local", "h200-cuda13.0", "mi300x-rocm6.4"):
        pin = load_pin(name)
        assert pin.backend in ("cpu", "cuda", "hip")
        assert len(pin.digest) == 64


def test_stack_show_prints_the_live_fingerprint(capsys: pytest.CaptureFixture[str]) -> None:
    """`regress stack show`: the digest first, then every key once with the hashed ones starred; with
    --json the fingerprint as stored (keys, digest, schema)."""
    fp = live_fingerprint("cpu")
    assert main(["stack", "show", "--backend", "cpu"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == f"digest  {fp.digest}  (schema {fp.schema_version})"
    rows = {line.split()[0]: line for line in lines[1:-1]}
    assert set(rows) == set(fp.keys) and lines[-1] == "  (* = part of the digest)"
    for key, line in rows.items():
        assert (line.split()[1] == "*") == (key in HASHED_KEYS), line
    assert main(["stack", "show", "--backend", "cpu", "--json"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert shown == json.loads(json.dumps(fp.to_dict())) and shown["digest"] == fp.digest
