"""Measure this machine's embedding backends (`sheaf.vectors.backend_choice`) with the real encoders:
sentence-transformers on torch in fp32 (the reference), bf16 / fp16 where the machine has them,
and the ONNX export. Run by the build in a process of its own (`backends.measure_in_child`)::

    python -m sheaf.vectors.backend_probe MODEL [--models-dir DIR] [--device cpu] [--threads N]

prints the `Measurement` as JSON (the caller records it in the home)."""
from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from sheaf.core.envelope import SheafError
from sheaf.vectors.backend_choice import Measurement, machine_facts
from sheaf.vectors.embedder import Embedder

__all__ = ["encoders_of", "probe"]


def encoders_of(embedder: Embedder, backends: Sequence[str], models_dir: Path | None = None
                ) -> dict[str, Callable[[Sequence[str]], Any]]:
    """Backend name → encode function for `backends`, with `embedder`'s loaded torch model (and the
    ONNX export of its identity in `models_dir`, when there is one: no export, no ONNX candidate)."""
    return embedder.backend_encoders(embedder.load(), backends, models_dir)


def probe(model: str, models_dir: Path | None, device: str = "cpu", threads: int | None = None) -> Measurement:
    """Load the model on torch (timed: the start-up a switch to torch costs), then measure every
    candidate of this machine on the probe set and choose (`Embedder.measure_backends`)."""
    emb = Embedder(model_name=model, device=device, threads=threads, precision="fp32")  # torch, no home
    ld = emb.load()
    return emb.measure_backends(ld, machine_facts(ld.identity.key, emb.resolved_device or device), models_dir)


def main(argv: list[str] | None = None) -> int:
    import argparse
    import sys

    ap = argparse.ArgumentParser(prog="python -m sheaf.vectors.backend_probe")
    ap.add_argument("model")
    ap.add_argument("--models-dir", type=Path, default=None)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--threads", type=int, default=None)
    a = ap.parse_args(argv)
    try:
        m = probe(a.model, a.models_dir, a.device, a.threads)
    except SheafError as e:
        print(f"{e.code}: {e.message}", file=sys.stderr)
        return 2
    print(m.to_json())
    return 0


if __name__ == "__main__":  # pragma: no cover - run by measure_in_child
    raise SystemExit(main())
