"""How the kernels may read an operand: through Hopper's tensor memory accelerator (TMA) or pointers.

Both backends read ``a`` and ``b`` by the modes this module gives (``MODE`` constexprs of their
kernels): 0, masked pointer loads; 1, a TMA descriptor of the row-major matrix; 2, a descriptor
of its transpose, for a column-major matrix. Each backend's ``operand_modes`` decides where the
descriptors are used (the target, the dtype, its product path); this module says where TMA can
address a matrix at all.
"""

from __future__ import annotations

import torch

__all__ = ["TMA_BOX", "tma_mode"]

#: Largest side of a TMA box, in elements (the hardware's limit).
TMA_BOX = 256


def tma_mode(t: torch.Tensor, rows_block: int, cols_block: int, row_step: int) -> int:
    """The mode for matrix ``t`` read in ``rows_block`` x ``cols_block`` tiles whose first rows
    are multiples of ``row_step``: a descriptor (1: row-major, 2: column-major) where TMA can
    address ``t``, else 0 (pointers).

    TMA needs a 16-byte aligned base, 16-byte multiples as strides but the unit one, boxes of at
    most 256 elements a side and (for a descriptor of the transpose, whose inner coordinate is
    then a row) rows starting 16 bytes apart, and no empty dimension. Only 16-bit dtypes take it: fp32 keeps the pointer
    loads it was measured with."""
    size = t.element_size()
    if size != 2 or t.numel() == 0 or t.data_ptr() % 16 or max(rows_block, cols_block) > TMA_BOX:
        return 0
    stride_r, stride_c = t.stride()
    if stride_c == 1 and stride_r * size % 16 == 0:
        return 1
    if stride_r == 1 and stride_c * size % 16 == 0 and row_step * size % 16 == 0:
        return 2
    return 0
