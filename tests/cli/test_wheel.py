"""Issue 11: a plain (non-editable) wheel carries everything the commands need. Built from a copy of
the checkout, installed into a fresh venv, and used from an empty directory with no checkout near."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.slow


def _sh(
    argv: list[str], cwd: Path, env: dict[str, str], timeout: float = 600
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, Path, dict[str, str]]]:
    base = tmp_path_factory.mktemp("wheel")
    src = base / "src"
    tracked = subprocess.run(
        ["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout.split("\0")
    for rel in filter(None, tracked):
        if (ROOT / rel).is_file():  # a file deleted in the work tree is not shipped
            (src / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / rel, src / rel)
    wheels = base / "dist"
    # a fresh install's defaults: no database URL, and the build cache in its own HOME (a developer's
    # REGRESS_CACHE_DIR sent it elsewhere and failed the cache-location check below)
    unset = ("PYTHONPATH", "REGRESS_DATABASE_URL", "REGRESS_CACHE_DIR")
    env = {k: v for k, v in os.environ.items() if k not in unset}
    built = _sh(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "-q",
            "--no-deps",
            "--no-build-isolation",
            "-w",
            str(wheels),
            ".",
        ],
        src,
        env,
    )
    assert built.returncode == 0, built.stderr[-2000:]
    (wheel,) = wheels.glob("regress-*.whl")
    venv = base / "venv"
    # System site-packages provide torch & co; the venv's own regress (the wheel) shadows any other.
    assert _sh([sys.executable, "-m", "venv", "--system-site-packages", str(venv)], base, env).returncode == 0
    inst = _sh(
        [str(venv / "bin" / "python"), "-m", "pip", "install", "-q", "--no-deps", str(wheel)], base, env
    )
    assert inst.returncode == 0, inst.stderr[-2000:]
    work = base / "empty"
    work.mkdir()
    env = {**env, "HOME": str(base / "home"), "PATH": f"{venv / 'bin'}:{env['PATH']}"}
    env.pop("REGRESS_STACKS_DIR", None)
    yield wheel, work, env


def test_wheel_carries_sources_migrations_web_and_pins(installed: tuple[Path, Path, dict[str, str]]) -> None:
    wheel, _, _ = installed
    names = set(zipfile.ZipFile(wheel).namelist())
    for needed in (
        "regress/_share/kernel/include/regress_attn.h",
        "regress/_share/kernel/cpu/attention_cpu.cpp",
        "regress/_share/kernel/torch/regress_op.cpp",
        "regress/_share/migrations/env.py",
        "regress/_share/web/templates/index.html.j2",
        "regress/_share/runners/stacks/cpu-local.toml",
        "regress/facts/contract.toml",
    ):
        assert needed in names, needed
    # The MI300X predictions the site shows are package data (pyproject's package-data), not _share/.
    assert [n for n in names if n.startswith("regress/facts/data/mi300x/predicted-") and n.endswith(".jsonl")]
    assert not [n for n in names if n.endswith((".so", ".pyc", ".co"))]


def test_installed_package_runs_from_an_empty_directory(installed: tuple[Path, Path, dict[str, str]]) -> None:
    _, work, env = installed
    where = _sh(["python", "-c", "import regress; print(regress.__file__)"], work, env)
    assert "/venv/lib/" in where.stdout, where.stdout + where.stderr
    nightly = _sh(["regress", "nightly", "--quick", "--backend", "cpu"], work, env)
    assert nightly.returncode == 0, nightly.stdout[-3000:] + nightly.stderr[-3000:]
    assert (work / ".regress" / "regress.db").is_file()
    assert (Path(env["HOME"]) / ".cache" / "regress" / "build").is_dir()  # not inside site-packages
    # The torch operator's C++ kernels build from the wheel's copy of kernel/torch (issue 40).
    code = (
        "from regress.kernel import op; import torch; q = torch.zeros(1, 2, 1, 128).bfloat16(); "
        "print(op.IMPLEMENTATION, op.attention_op(q, q, q, 'bshd', 'rtne').shape)"
    )
    op = _sh(["python", "-c", code], work, env)
    assert op.stdout.split()[0] == "native", op.stdout + op.stderr[-2000:]

    demo = _sh(["regress", "demo-history", "--nights", "4", "--stacks", "1", "--cases", "12", "--db",
                "sqlite:///demo.db"], work, env)  # fmt: skip
    assert demo.returncode == 0, demo.stderr[-2000:]
    site = _sh(["regress", "site", "--db", "sqlite:///demo.db", "--out", "site"], work, env)
    assert site.returncode == 0, site.stderr[-2000:]
    assert (work / "site" / "index.html").is_file()
    # The site's predicted MI300X table reads the installed package's copy of the predictions.
    code = "from regress.present.site import predicted; print(predicted.latest_file())"
    latest = _sh(["python", "-c", code], work, env)
    shown = latest.stdout.strip()
    assert "/venv/lib/" in shown and shown.endswith(".jsonl"), latest.stdout + latest.stderr


def test_shipped_pins_are_readable_and_user_pins_need_a_folder(
    installed: tuple[Path, Path, dict[str, str]],
) -> None:
    _, work, env = installed
    shipped = _sh(["regress", "stack", "check", "h200-cuda13.0"], work, env)
    assert "no pinned stack" not in shipped.stderr and "h200-cuda13.0" in shipped.stdout + shipped.stderr
    refused = _sh(["regress", "stack", "pin", "mine", "--backend", "cpu"], work, env)
    assert refused.returncode == 2 and "--stacks-dir" in refused.stderr
    pinned = _sh(["regress", "stack", "pin", "mine", "--backend", "cpu", "--stacks-dir", "pins"], work, env)
    assert pinned.returncode == 0, pinned.stderr
    assert (work / "pins" / "mine.toml").is_file()
    checked = _sh(
        ["regress", "stack", "check", "mine"], work, {**env, "REGRESS_STACKS_DIR": str(work / "pins")}
    )
    assert checked.returncode == 0, checked.stderr


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_installed_service_answers(installed: tuple[Path, Path, dict[str, str]]) -> None:
    _, work, env = installed
    port = _free_port()
    proc = subprocess.Popen(
        ["regress", "serve", "--port", str(port), "--db", "sqlite:///served.db"],
        cwd=work,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=2) as resp:
                    assert resp.status == 200
                    break
            except OSError:
                assert proc.poll() is None, proc.stdout.read() if proc.stdout else ""
                assert time.monotonic() < deadline, "regress serve did not answer within 60 s"
                time.sleep(0.3)
    finally:
        proc.terminate()
        proc.wait(timeout=20)


def test_sdist_manifest_lists_what_the_wheel_ships() -> None:
    """MANIFEST.in cannot import Python, so the folders and files it grafts are a second list of
    resources.SHARED_TREES / SHARED_FILES; this keeps the two the same (the wheel test builds from
    the tree, so a drift would otherwise show only in an sdist build)."""
    from regress.facts.resources import SHARED_FILES, SHARED_TREES

    lines = [ln.split() for ln in (ROOT / "MANIFEST.in").read_text().splitlines() if ln and ln[0] != "#"]
    grafted = {words[1] for words in lines if words[0] == "graft"}
    included = {name for words in lines if words[0] == "include" for name in words[1:]}
    assert grafted == set(SHARED_TREES)
    assert set(SHARED_FILES) <= included
