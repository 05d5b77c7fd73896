"""benchmarks/campaigns/INDEX.md lists every campaign archive: each archive (and each `callN/` folder
of one) has its entry in calls.toml, the docs cite only members that are there, and the committed
INDEX.md is what benchmarks/campaigns/campaign_index.py writes today."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

from committed import CAMPAIGNS

sys.path.insert(0, str(CAMPAIGNS))  # the index's writer lives beside the archives
import campaign_index as index


def test_every_archive_has_its_entry_and_the_index_is_current() -> None:
    assert index.problems() == []
    assert index.INDEX.read_text() == index.render(), "run python3 benchmarks/campaigns/campaign_index.py"
    assert len(list(CAMPAIGNS.glob("*.tar.xz"))) >= 16  # fewer means the archives moved


def test_the_docs_cite_the_index() -> None:
    texts = index.docs()
    assert any("benchmarks/campaigns/INDEX.md" in t for t in texts.values())


def test_a_missing_entry_or_a_dangling_citation_is_named(tmp_path: Path) -> None:
    """Planted faults, one each: an archive calls.toml does not know, a call folder without its row,
    a table without its archive, and a doc citing a member the archive does not hold."""
    folder = tmp_path / "campaigns"
    folder.mkdir()
    shutil.copy(CAMPAIGNS / "h200-split.tar.xz", folder)
    shutil.copy(CAMPAIGNS / "results-limit.tar.xz", folder / "new-campaign.tar.xz")
    calls = tmp_path / "calls.toml"
    split = "".join(
        f'[["h200-split".call]]\nmember = "call{n}/"\ncommit = "abc1234"\ndate = "2026-12-01"\nwhat = "x"\n'
        for n in range(1, 6)  # call6/ left out
    )
    calls.write_text(split + '["gone"]\ncommit = "abc1234"\ndate = "2026-12-01"\nwhat = "y"\n')
    (tmp_path / "docs").mkdir()
    (tmp_path / "README.md").write_text("see `h200-split.tar.xz:call9/log.txt` and `aiter.tar.xz:x`\n")
    found = index.problems(folder, calls, tmp_path)
    assert found == [
        "new-campaign.tar.xz has no table in calls.toml",
        "calls.toml names gone, but there is no gone.tar.xz",
        "h200-split.tar.xz:call6/ has no row in calls.toml",
        "README cites h200-split.tar.xz:call9/log.txt, which the archive does not hold",
    ]
    calls.write_text(
        split + '[["h200-split".call]]\nmember = "call6/"\ncommit = "c"\ndate = "d"\nwhat = "z"\n'
    )
    shutil.copy(CAMPAIGNS / "h200-split.tar.xz", folder / "new-campaign.tar.xz")
    (tmp_path / "README.md").write_text("see `h200-split.tar.xz:call6/`\n")
    assert index.problems(folder, calls, tmp_path) == ["new-campaign.tar.xz has no table in calls.toml"]
