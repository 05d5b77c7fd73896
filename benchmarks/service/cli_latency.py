"""CLI start-up latency: how long `regress` takes before it does anything (issue 11).

Runs each command N times (default 10) in a fresh interpreter and reports the median wall time
next to `python -c pass`. With `--compare TREE` the same commands also run against another source
tree (e.g. a clone of an older commit), interleaved round by round, so both columns see the same
machine load. A benchmark, not a test: nothing here passes or fails.

    python benchmarks/service/cli_latency.py [--rounds 10] [--compare /tmp/old-checkout]
"""

from __future__ import annotations

import argparse
import os
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from regress.facts.stats import median

HERE = Path(__file__).resolve().parents[2]


def _series_csv(path: Path, nights: int = 120, seed: int = 7) -> None:
    rng = random.Random(seed)
    lines = ["night,value"] + [
        f"{i},{10.0 * (1.05 if i >= nights // 2 else 1.0) * (1 + rng.gauss(0, 0.01)):.5f}"
        for i in range(nights)
    ]
    path.write_text("\n".join(lines) + "\n")


def _empty_db(tree: Path, url: str) -> None:
    code = "import sys; from regress.store.repo import open_store; open_store(sys.argv[1]).engine.dispose()"
    env = {**os.environ, "PYTHONPATH": str(tree)}
    subprocess.run([sys.executable, "-c", code, url], check=True, env=env, cwd=tree.parent)


def _time(argv: list[str], tree: Path | None, cwd: Path) -> float:
    env = {**os.environ, "PYTHONPATH": str(tree)} if tree else dict(os.environ)
    t0 = time.perf_counter()
    # cwd outside both trees: `python -m` puts the working directory first on sys.path.
    proc = subprocess.run(argv, env=env, cwd=cwd, capture_output=True, text=True)
    dt = time.perf_counter() - t0
    if proc.returncode not in (0, 1):  # detect exits 1 when it finds a step, as intended here
        raise SystemExit(f"{' '.join(argv)} (tree {tree}) failed: {proc.stderr.strip()[-400:]}")
    return dt


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=10)
    ap.add_argument("--compare", type=Path, help="another source tree to time side by side")
    args = ap.parse_args()

    trees = {"this tree": HERE}
    if args.compare:
        trees["compare"] = args.compare.resolve()
    with tempfile.TemporaryDirectory() as tmp:
        csv_path = Path(tmp) / "series.csv"
        _series_csv(csv_path)
        dbs = {name: f"sqlite:///{Path(tmp) / f'empty-{i}.db'}" for i, name in enumerate(trees)}
        for name, tree in trees.items():
            _empty_db(tree, dbs[name])
        py = [sys.executable]
        cases: dict[str, dict[str, list[str]]] = {
            "python -c pass": {name: [*py, "-c", "pass"] for name in trees},
            "regress --help": {name: [*py, "-m", "regress", "--help"] for name in trees},
            "regress runs list (empty db)": {
                name: [*py, "-m", "regress", "runs", "list", "--db", dbs[name]] for name in trees
            },
            "regress detect --csv (120 rows)": {
                name: [*py, "-m", "regress", "detect", "--csv", str(csv_path)] for name in trees
            },
        }
        times: dict[tuple[str, str], list[float]] = {(c, n): [] for c in cases for n in trees}
        for _ in range(args.rounds):
            for case, per_tree in cases.items():
                order = list(per_tree.items())
                random.shuffle(order)  # neither tree always runs first in a round
                for name, argv in order:
                    tree = None if case == "python -c pass" else trees[name]
                    times[(case, name)].append(_time(argv, tree, Path(tmp)))
    load = os.getloadavg()
    print(f"median of {args.rounds} runs, seconds; {os.cpu_count()} cores, load average {load[0]:.2f}")
    names = list(trees)
    print(f"| command | {' | '.join(names)} |")
    print(f"|---|{'---|' * len(names)}")
    for case in cases:
        cells = [f"{median(times[(case, n)]):.3f}" for n in names]
        print(f"| {case} | {' | '.join(cells)} |")


if __name__ == "__main__":
    main()
