"""The gfx942-emu stack page shows the committed predicted MI300X table, labelled predicted, and no
other stack's page does; a stored run's measured figures are never mixed with it."""

from __future__ import annotations

from pathlib import Path

from regress.present.site import build_site, predicted
from regress.store.repo import finish_run, get_or_create_stack, open_store, start_run


def test_the_emulator_stack_page_shows_the_predicted_table(tmp_path: Path) -> None:
    path = predicted.latest_file()
    assert path is not None, "no committed regress/facts/data/mi300x/predicted-*.jsonl"
    table = predicted.load(path)
    assert table is not None and table["rows"] and table["summary"]["predicted"] is True
    store = open_store(f"sqlite:///{tmp_path / 's.db'}")
    ids = {}
    with store.transaction() as s:
        for name, backend in (("gfx942-emu", "hip-emu"), ("h200-cuda13.0", "cuda")):
            st = get_or_create_stack(
                s, digest=name * 2, keys={"backend": backend}, schema_version=1, name=name
            )
            s.flush()
            ids[name] = st.id
    for name in ids:
        rid = start_run(store, stack_id=ids[name], build_id=None, backend="x", suites=["perf"])
        finish_run(store, rid, status="complete", summary={}, exit_code=0)
    build_site(store, tmp_path / "site")
    store.engine.dispose()
    pages = {p.name: p.read_text() for p in (tmp_path / "site" / "stack").glob("*.html")}
    emu = next(t for n, t in pages.items() if "gfx942-emu" in n and "diff" not in n)
    cuda = next(t for n, t in pages.items() if "h200" in n and "diff" not in n)
    assert "Predicted MI300X" in emu and "not measured" in emu and "predicted MI300X ms" in emu
    assert emu.count("<tr><td>") >= len(table["rows"])
    # every prediction with its band, our ratios with theirs (computed per reading)
    assert "predicted low" in emu and "predicted high" in emu and "ours vs AITER (predicted, low–high)" in emu
    r = table["rows"][0]
    assert f"{r['low_ms']:.3f}" in emu and f"{r['high_ms']:.3f}" in emu
    assert "Predicted MI300X" not in cuda
