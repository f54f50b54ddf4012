"""vLLM simulator: a GPU-free stand-in for vLLM's OpenAI-compatible server.

It mimics vLLM's command line, HTTP endpoints, metrics, log lines and failure
messages, with a timing model calibrated on measured speculative-decoding runs.
Standard library only.
"""

from vllm.version import __version__

__all__ = ["__version__"]
