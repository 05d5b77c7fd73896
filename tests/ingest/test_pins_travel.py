"""Issue #42 item 2 (and #41 item 18): pins that travel, one drift rule.

The machine is another one by its facts, given through the functions' inputs: a fingerprint whose
hashed keys are the `cpu-local` pin's (so its digest is that pin's) on another OS kernel build and
another Python. `stack check`, `nightly --stack`, a plain nightly and both imports (`regress import`
and the service) decide by stack_keys.drifted_keys, so a plain nightly's bundle is accepted by its
own project, and a drift `nightly --stack` refuses is the one `stack check` names.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from ingest_client import post
from ingest_server import Service

from regress.cli import main
from regress.facts.errors import UserError
from regress.facts.stack_keys import HASHED_KEYS, PINNED_KEYS, Fingerprint
from regress.machine.pins import check_pin, load_pin, run_drift
from regress.run.nightly import NightlyOptions, run_nightly


def _other_machine(**changed: str) -> Fingerprint:
    """The cpu-local pin's stack keys as another machine reports them (`changed` differ)."""
    pin = load_pin("cpu-local")
    keys = {k: pin.expected[k] for k in (*HASHED_KEYS, *PINNED_KEYS)}
    return Fingerprint(keys={**keys, **changed}, diagnostics={"os_kernel": "5.4.0-200-generic"})


def test_the_os_kernel_build_is_not_drift() -> None:
    """Another kernel build matches the pin: on main, every machine but the author's drifted."""
    pin = load_pin("cpu-local")
    fp = _other_machine()
    assert fp.digest == pin.digest
    assert check_pin(pin, fp) == []
    assert run_drift(pin, fp, allow_drift=False) == (pin, [])
    # A fingerprint that still carries the key (an older client) is not judged by it either.
    older = Fingerprint(keys={**fp.keys, "os_kernel": "5.4.0-200-generic"})
    assert check_pin(pin, older) == []


def test_a_pinned_key_that_differs_is_refused_by_stack_and_recorded_by_a_plain_nightly() -> None:
    pin = load_pin("cpu-local")
    fp = _other_machine(python="3.12.9")
    assert [d.key for d in check_pin(pin, fp)] == ["python"]  # what `stack check` prints
    with pytest.raises(UserError, match=r"(?s)python.*3\.12\.9.*--allow-drift"):
        run_drift(pin, fp, allow_drift=False)  # `nightly --stack cpu-local`
    matched, notes = run_drift(None, fp, allow_drift=False)  # a plain `nightly`
    assert matched is not None and matched.name == "cpu-local"
    assert len(notes) == 1 and "python" in notes[0] and "3.12.9" in notes[0]
    assert run_drift(pin, fp, allow_drift=True) == (pin, notes)


@pytest.mark.e2e
@pytest.mark.parametrize("changed", [{}, {"python": "3.12.9"}], ids=["kernel-build", "python"])
def test_a_plain_nightly_bundle_is_accepted_by_its_own_imports(
    tmp_path: Path, service: Service, changed: dict[str, str]
) -> None:
    """The whole plain `regress nightly --quick` on the other machine, then its bundle through
    `regress import` into a fresh database and through the service: stored, not 409."""
    local = f"sqlite:///{tmp_path / 'local.db'}"
    outcome = run_nightly(
        NightlyOptions(
            backend="cpu",
            quick=True,
            suites=("determinism",),
            db=local,
            out=tmp_path / "out",
            fingerprint=_other_machine(**changed),
        )
    )
    assert outcome.exit_code == 0 and outcome.bundle_path is not None, outcome.summary
    bundle = json.loads(outcome.bundle_path.read_text())
    assert bundle["stack"]["digest"] == load_pin("cpu-local").digest
    assert bool(bundle["run"]["host"].get("drift")) == bool(changed)
    fresh = f"sqlite:///{tmp_path / 'fresh.db'}"
    assert main(["import", str(outcome.bundle_path), "--db", fresh]) == 0
    resp = post(service, bundle, service.token("runner-elsewhere"))
    assert resp.status_code == 201, resp.text
