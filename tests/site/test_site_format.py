"""How device snapshots read on the pages: nvidia-smi, rocm-smi and CPU snapshots as clocks,
temperature and power, never as raw keys (the site showed `time_unix 1796018983.301` before)."""

from __future__ import annotations

from regress.present.site.format import describe_device, device_rows, fmt_ratio, host_rows, throttle_text


def test_nvidia_snapshot() -> None:
    snap = {
        "time_unix": 1795953146.16,
        "gpu": {
            "clocks.sm": 1800.0,
            "clocks.max.sm": 1980.0,
            "clocks.mem": 3201.0,
            "temperature.gpu": 50.0,
            "power.draw": 644.62,
            "power.limit": 700.0,
            "utilization.gpu": 91.0,
            "pstate": "P0",
            "clocks_throttle_reasons.active": "0x0000000000000004",
        },
    }
    assert describe_device(snap) == (
        "SM 1800 MHz of 1980 · mem 3201 MHz · 50 °C · 645 W of 700 · util 91 % · P0 · "
        "throttle: SW power cap · at 11:52:26 UTC"
    )


def test_rocm_snapshot() -> None:
    snap = {
        "gpu": {
            "tool": "rocm-smi",
            "Temperature (Sensor junction) (C)": 61.0,
            "Current Socket Graphics Package Power (W)": 612.0,
            "sclk clock speed:": "(1700Mhz)",
            "mclk clock speed:": "(1300Mhz)",
        }
    }
    assert describe_device(snap) == "SM 1700 MHz · mem 1300 MHz · 61 °C · 612 W"


def test_cpu_and_odd_snapshots() -> None:
    cpu = {"cpu": {"model": "AMD EPYC 9654", "mhz_mean": 2400.4, "loadavg_1m": 1.5}}
    assert describe_device(cpu) == "AMD EPYC 9654 · 2400 MHz mean · load 1.50"
    assert describe_device("nonsense") == "" and describe_device({}) == ""
    assert device_rows({"before": {}, "after": "x"}) == [{"who": "device", "before": "", "after": ""}]
    assert device_rows(None) == []


def test_workers_each_get_a_row() -> None:
    snap = {"gpu": {"clocks.sm": 1980.0}}
    rows = device_rows(
        {"before": snap, "after": snap, "workers": {"worker1": {"before": snap}, "worker0": {"after": snap}}}
    )
    assert [r["who"] for r in rows] == ["parent process", "worker 0", "worker 1"]
    assert rows[1] == {"who": "worker 0", "before": "", "after": "SM 1980 MHz"}


def test_throttle_bits_and_ratio() -> None:
    assert throttle_text("0x0000000000000000") == "none"
    assert throttle_text("0x41") == "idle, HW thermal"
    assert throttle_text(0x10) == "0x10"
    assert fmt_ratio(1.5552) == "1.555×" and fmt_ratio(None) == "" and fmt_ratio(float("nan")) == ""


def test_host_record_reads_per_gpu() -> None:
    host = {
        "hostname": "vm",
        "cpus": 32,
        "drift": ["a", "b"],
        "fingerprint_diagnostics": {
            "hostname": "vm",
            "gpus": [
                {"index": 1, "uuid": "GPU-x", "serial": "42", "clock_sm": "345 MHz", "temperature": "33"}
            ],
        },
    }
    assert host_rows(host) == [
        ("host hostname", "vm"),
        ("host cpus", "32"),
        ("host drift", "a\nb"),
        ("GPU 1", "GPU-x · serial 42 · 345 MHz · 33 °C"),
    ]
    assert host_rows("x") == []
    # Stored JSON of any shape renders (found by the bundle fuzzer: "gpus" mutated to an int).
    assert host_rows({"fingerprint_diagnostics": {"gpus": 3}}) == [("host gpus", "3")]
    assert host_rows({"fingerprint_diagnostics": {"gpus": [7, "x", {"index": 0}]}}) == [("GPU 0", "")]
