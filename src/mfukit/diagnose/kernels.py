"""What a GPU event is: compute, communication or memory traffic — never a silent zero.

HTA classifies kernels by name and, when a name matches nothing it knows, quietly counts that time as
nothing at all; a trace whose NCCL kernels use a naming scheme it does not know shows zero
communication. Here the order is: the event's category (memcpy/memset), then communication by name —
both NCCL schemes (``ncclKernel_*`` up to 2.18, ``ncclDevKernel_*`` from 2.19), RCCL, the custom
all-reduce kernels of vLLM / TensorRT-LLM / symmetric memory — or by the ``Collective name`` argument
PyTorch attaches to collective kernels, and everything else is compute. The caller counts the names
that were not recognised as anything specific so that a trace whose communication went unrecognised
can be called out (see ``KernelStats.unrecognised_comm_hint``).
"""

from __future__ import annotations

import re
from typing import Literal

Category = Literal["compute", "comm", "memcpy"]

COMM_NAME = re.compile(
    r"^(?:void\s+)?(?:nccl|rccl)(?:Dev)?Kernel|ncclKernel|ncclDevKernel"
    r"|cross_device_reduce|all_reduce_one_shot|all_reduce_two_shot|multimem_all_reduce"
    r"|one_shot_all_reduce|two_shot_all_reduce|AllReduce|ReduceScatter|AllGather|SendRecv",
)
MEMORY_CATEGORIES = frozenset({"gpu_memcpy", "gpu_memset", "Memcpy", "Memset"})
KERNEL_CATEGORIES = frozenset({"kernel", "Kernel"})
# Kernels that run on the tensor cores (matmul/convolution libraries and their generated kernels).
TENSOR_CORE_NAME = re.compile(
    r"gemm|cutlass|xmma|hmma|wgmma|tensorop|_mma|mma_|cublasLt|cudnn.*conv|convolve|implicit_?gemm"
    r"|flash|fmha|sm\d\d_|Cijk_",
    re.IGNORECASE,
)
_COLLECTIVE = re.compile(r"(AllReduce|ReduceScatter|AllGather|Broadcast|Reduce|SendRecv|AllToAll|Send|Recv)")


def categorize(cat: str, name: str, args: dict[str, object] | None) -> Category:
    """The category of one GPU event from its Kineto ``cat``, ``name`` and ``args``."""
    if cat in MEMORY_CATEGORIES:
        return "memcpy"
    if COMM_NAME.search(name) or (args is not None and "Collective name" in args):
        return "comm"
    return "compute"


def collective_of(name: str, args: dict[str, object] | None) -> str:
    """The collective a comm kernel runs (``AllReduce``, ``SendRecv``...), from its args or name."""
    if args is not None:
        named = args.get("Collective name")
        if isinstance(named, str) and named:
            return named
    match = _COLLECTIVE.search(name)
    return match.group(1) if match else "unknown"


def is_tensor_core(name: str) -> bool:
    return TENSOR_CORE_NAME.search(name) is not None
