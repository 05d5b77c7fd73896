from __future__ import annotations

from pathlib import Path

import pytest

from regress.machine.gpu_state import cpu_state, device_state, gpu_state


def test_cpu_state_names_the_processor() -> None:
    s = cpu_state()
    assert s["logical_cpus"] >= 1
    assert "model" in s


def _tool(bin_dir: Path, name: str, script: str) -> None:
    path = bin_dir / name
    path.write_text("#!/bin/sh\n" + script + "\n")
    path.chmod(0o755)


def test_device_state_degrades_gracefully(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Real executables on PATH stand in for the vendor tools: one that fails, one that prints
    garbage, one with a short row, one with bad JSON; each gives {} and never raises, and a tool
    that answers properly is parsed, so {} is not what the function always returns."""
    assert "cpu" in device_state("cpu")
    monkeypatch.setenv("PATH", str(tmp_path))
    assert gpu_state(0) == {}  # no tool at all
    _tool(tmp_path, "nvidia-smi", "exit 3")
    _tool(tmp_path, "rocm-smi", "echo '{not json'")
    assert gpu_state(0) == {}
    _tool(tmp_path, "nvidia-smi", "echo 'NVIDIA H200, P0'")  # fewer fields than asked
    _tool(tmp_path, "rocm-smi", "echo '[1, 2]'")
    assert gpu_state(0) == {}
    _tool(tmp_path, "nvidia-smi", "echo 'NVIDIA H200, 1980, 3201, 41, 123.5'")  # the minimal query's row
    state = gpu_state(0)
    assert state["tool"] == "nvidia-smi" and state["name"] == "NVIDIA H200"
    assert state["clocks.sm"] == 1980.0 and state["power.draw"] == 123.5
    _tool(tmp_path, "nvidia-smi", "exit 1")
    _tool(tmp_path, "rocm-smi", """echo '{"card0": {"Temperature (Sensor edge) (C)": "35.0"}}'""")
    assert gpu_state(0) == {"tool": "rocm-smi", "Temperature (Sensor edge) (C)": 35.0}
