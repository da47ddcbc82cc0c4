"""Fault tolerance: failure models, checkpoint cost, optimum intervals, expected and simulated ETTR (no torch)."""
