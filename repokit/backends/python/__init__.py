"""Triton python-backend compatible runtime (one process per instance; see backend.py)."""
