"""Dynamic speculative decoding: a batch-size schedule for K."""
