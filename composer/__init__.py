"""Render, build, swap and benchmark vLLM speculative-decoding containers."""

__version__ = "0.1.0"
