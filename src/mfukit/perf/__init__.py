"""Performance model: FLOPs, memory, step time, the layout planner and cluster sizing (no torch)."""
