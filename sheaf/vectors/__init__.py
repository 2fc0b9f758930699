"""Vectors layer: model identity and value types, passages, the embedder, ONNX export and query encoder."""
