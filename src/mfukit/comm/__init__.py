"""Communication: collective cost models, nccl-tests and NCCL log parsing, live collective benchmarks."""
