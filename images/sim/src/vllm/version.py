"""Version of the simulated vLLM."""

__version__ = "0.0.0+sim"
