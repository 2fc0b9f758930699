"""The bundled sample library is what its generator writes: regenerated into a temp folder, every
file equals the committed one, and no committed paper is left that the generator no longer makes."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SAMPLE = ROOT / "data" / "sample-library"


def _outputs(folder: Path) -> dict[str, bytes]:
    """library.json and every paper's files, by path relative to `folder`."""
    files = [folder / "library.json", *(p for p in (folder / "papers").rglob("*") if p.is_file())]
    return {p.relative_to(folder).as_posix(): p.read_bytes() for p in files}


def test_the_sample_library_is_regenerated_byte_for_byte(tmp_path: Path):
    run = subprocess.run([sys.executable, str(SAMPLE / "_build" / "make_samples.py"), "--out", str(tmp_path)],
                         capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    made, committed = _outputs(tmp_path), _outputs(SAMPLE)
    assert sorted(made) == sorted(committed)
    assert [name for name in made if made[name] != committed[name]] == []
