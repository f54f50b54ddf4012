"""Simulation internals: timing model, token stream, engine, HTTP server, boot."""
