"""Collectives: the cost model, nccl-tests and NCCL_DEBUG log judges (torch only in comm/bench.py)."""
