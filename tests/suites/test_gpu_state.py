from __future__ import annotations

from regress.gpu_state import cpu_state, device_state, gpu_state


def test_cpu_state_names_the_processor() -> None:
    s = cpu_state()
    assert s["logical_cpus"] >= 1
    assert "model" in s


def test_device_state_degrades_gracefully() -> None:
    assert "cpu" in device_state("cpu")
    assert isinstance(gpu_state(0), dict)  # {} without a GPU or a query tool, never a raise
