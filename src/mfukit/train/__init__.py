"""The fault-tolerant training harness (``mfukit train``) on torchrun, torch.distributed and DCP.

Modules that import torch do so lazily; the launcher, the commit protocol and the emitters run
without it. The goodput ledger the run writes is ``ft.ledger``, read by diagnose and watch too.
"""
