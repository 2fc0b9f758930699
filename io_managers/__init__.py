"""IO managers: per-partition Parquet/JSON artifacts."""
from io_managers.parquet import PaperArtifactIOManager

__all__ = ["PaperArtifactIOManager"]
