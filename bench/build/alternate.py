"""Two code versions of Sheaf, alternated on one built home: edit → searchable, removal, no-op
and `sheaf status`, each a fresh process (docs/benchmarks.md, "Two code versions side by
side"); with `--rebuild-papers N`, also `sheaf build --full`
of N papers (orchestration only: their embeddings are cached), wall and the runs' own seconds.
`--rounds 0 --quick-rounds 0 --rebuild-papers 99` runs the rebuilds alone (99 papers
of 1,000 stay under the library report's 10% share).

The home and library are used as they are and changed by the run: each round edits one paper
(a sentence with a new word, then a search for it) and removes another, so work on a copy, e.g.
the 10,000-paper home `bench/build/scale.py --sizes 10000 --work W` leaves in W:

    cp -a W/home-10000 /tmp/h && cp -a W/lib-10000 /tmp/l
    git worktree add /tmp/old <rev>
    .venv/bin/python -m bench.build.alternate /tmp/h /tmp/l --rounds 3 old=/tmp/old new=.

Each NAME=DIR runs `python -m sheaf` with DIR as its working directory (so DIR's packages are
the ones imported), in this project's venv.
"""
from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from bench.build.scale import home_env as scale_env  # bench/build/scale.py: the same home and library variables

PY = sys.executable


def sheaf(code: Path, env: dict[str, str], *argv: str) -> tuple[float, dict[str, Any]]:
    t = time.perf_counter()
    p = subprocess.run([PY, "-m", "sheaf", *argv, "--json"], cwd=code, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - t
    try:
        return round(wall, 2), json.loads(p.stdout)
    except ValueError:
        raise SystemExit(f"sheaf {' '.join(argv)} in {code} failed ({p.returncode}):\n{p.stderr[-2000:]}") from None


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("home", type=Path)
    ap.add_argument("library", type=Path)
    ap.add_argument("codes", nargs="+", help="NAME=DIR: a checkout of the code to run")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--quick-rounds", type=int, default=5, help="rounds of no-op and status")
    ap.add_argument("--rebuild-papers", type=int, default=0,
                    help="also alternate `sheaf build --full` of this many papers (orchestration only: their "
                         "embeddings are cached), --rebuild-rounds times; 0: not")
    ap.add_argument("--rebuild-rounds", type=int, default=5)
    a = ap.parse_args()
    codes = {n: Path(d).resolve() for n, d in (c.split("=", 1) for c in a.codes)}
    env = {**scale_env(a.home.resolve(), a.library.resolve()), "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    papers = a.library / "papers"
    keys = sorted(p.name for p in papers.iterdir())
    out: dict[str, dict[str, list[float]]] = {n: {"edit": [], "searchable": [], "remove": [], "noop": [],
                                                  "status": [], "rebuild": [], "rebuild_runs": []} for n in codes}
    def pick(at: int) -> str:  # the first paper from `at` on that is still in the library
        for j in range(len(keys)):
            if (papers / keys[(at + j) % len(keys)]).is_dir():
                return keys[(at + j) % len(keys)]
        raise SystemExit("no paper left in the library")

    sheaf(next(iter(codes.values())), env, "build")  # settle: the stat cache of a copied library
    i = 0
    for _ in range(a.rounds):
        for name, code in codes.items():
            i += 1
            key = pick(100 + 37 * i)
            md = next(p for p in (papers / key).iterdir() if p.suffix == ".md")
            word = f"zqx{i}r{int(time.time())}alt"
            md.write_text(md.read_text(encoding="utf-8") + f"\nAn added sentence names {word} once.\n",
                          encoding="utf-8")
            t0 = time.perf_counter()
            wall, _ = sheaf(code, env, "build")
            _, hits = sheaf(code, env, "search", word)
            if [m["zotero_key"] for m in hits["data"]["matches"]][:1] != [key]:
                raise SystemExit(f"{name}: the edited paper {key} is not the first hit for {word}")
            out[name]["edit"].append(wall)
            out[name]["searchable"].append(round(time.perf_counter() - t0, 2))
            gone = pick(len(keys) // 2 + 41 * i)
            shutil.rmtree(papers / gone)
            wall, env_ = sheaf(code, env, "build")
            if env_["data"]["sync"]["removed"] != [gone]:
                raise SystemExit(f"{name}: the removal of {gone} was not seen: {env_['data']['sync']}")
            out[name]["remove"].append(wall)
            print(name, {k: v for k, v in out[name].items() if v}, file=sys.stderr, flush=True)
    for _ in range(a.quick_rounds):
        for name, code in codes.items():
            wall, env_ = sheaf(code, env, "build")
            if env_["data"]["plan"].get("dagster") is not False:
                raise SystemExit(f"{name}: the no-op went the Dagster way: {env_['data']['plan']}")
            out[name]["noop"].append(wall)
            out[name]["status"].append(sheaf(code, env, "status")[0])
    chosen = [k for k in keys if (papers / k).is_dir()][100:100 + a.rebuild_papers]
    for _ in range(a.rebuild_rounds if chosen else 0):
        for name, code in codes.items():
            wall, env_ = sheaf(code, env, "build", "--full", *(x for k in chosen for x in ("--paper", k)))
            if env_["data"]["embeddings_computed"] or len(env_["data"]["planned"]) != len(chosen):
                raise SystemExit(f"{name}: not an orchestration-only rebuild of {len(chosen)} papers: "
                                 f"{len(env_['data']['planned'])} planned, {env_['data']['embeddings_computed']} embedded")
            out[name]["rebuild"].append(wall)
            out[name]["rebuild_runs"].append(round(sum(r["seconds"] for r in env_["data"]["runs"]), 2))
            print(name, "rebuild", wall, out[name]["rebuild_runs"][-1], file=sys.stderr, flush=True)
    print(json.dumps({n: {k: {"runs": v, "median": statistics.median(v)} for k, v in r.items() if v}
                      for n, r in out.items()}, indent=1))


if __name__ == "__main__":
    main()
