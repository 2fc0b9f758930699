"""Eval layer: retrieval metrics, BEIR runs and library known-item runs."""
