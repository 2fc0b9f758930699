"""`embed status` latency while `embed build` runs (the PaperForge plugin kills a poll after 5 s).

Builds a vault of the four real PaddleOCR-VL outputs (../shared/data) from scratch with
`python -m sheaf.paperforge embed build --force` and polls `embed status --json` back to back
from fresh processes until it ends; prints the polls' p50 / p95 / max. Needs ../shared.

    python -m bench.serve.paperforge_poll [WORKDIR]
"""
from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from tests.kits.paperforge import make_vault

ROOT = Path(__file__).resolve().parents[2]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("workdir", nargs="?", type=Path, help="where the vault is made (default: a new temp folder)")
    args = ap.parse_args()
    work = args.workdir or Path(tempfile.mkdtemp(prefix="pf-poll-"))
    vault = make_vault(work / "vault")
    pf = [sys.executable, "-m", "sheaf.paperforge", "--vault", str(vault)]
    build = subprocess.Popen([*pf, "embed", "build", "--force"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                             stderr=subprocess.DEVNULL, text=True)
    times, running = [], 0
    while build.poll() is None:
        t0 = time.perf_counter()
        out = subprocess.run([*pf, "embed", "status", "--json"], capture_output=True, text=True, timeout=30)
        times.append(time.perf_counter() - t0)
        running += json.loads(out.stdout)["data"]["build_state"]["status"] == "running"
    build.communicate()
    q = statistics.quantiles(times, n=20)
    print(f"polls {len(times)} (running {running}): p50 {statistics.median(times):.2f} s, p95 {q[18]:.2f} s, "
          f"max {max(times):.2f} s")


if __name__ == "__main__":
    main()
