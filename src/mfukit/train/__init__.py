"""The fault-tolerant training harness (``mfukit train``) on torchrun, torch.distributed and DCP.

Modules that import torch do so lazily; the launcher, the commit protocol, the ledger and the emitters
run without it.
"""
