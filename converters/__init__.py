"""Conversion pipeline and per-format converters (installed as ``edge_sdk.converters``)."""
