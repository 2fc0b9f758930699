"""Benchmarks of reading papers: the per-paper transform, the PDF reader, OCR."""
