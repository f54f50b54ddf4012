"""Version of the simulated vLLM."""

__version__ = "0.32.0+sim"
