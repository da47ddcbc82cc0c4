"""Communication: gradient traffic of a layout, the collective cost model, nccl-tests and NCCL log judges."""
