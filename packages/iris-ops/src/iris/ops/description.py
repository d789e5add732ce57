"""How a fused operation describes itself to its peers, on the collectives' protocol.

A fused operation is one call on ``iris.ccl.protocol``: its kernel publishes a description at its
entry and every rank compares every rank's with its own before anyone touches a peer. The
operations are registered there as kinds of their own (``KINDS``), and fill the description's
words as follows:

- CODE: the operation, its variant (``push``: this rank stores into peers; ``push stacked``: so,
  into a W x M x n result; ``pull``: it reads them), the reduction op, the dtype, which buffers
  peers access in place (``on heap``), the tiling in the source field (``tiles``: log2 of each
  tile side less 4, and ``group_m``) and the programs per launch in the layout field.
- NUMEL: the rows of ``a`` (per rank for ``all_gather_matmul``, else in all).
- OFF_A / OFF_B: the heap offsets of the buffers peers access (a heap tensor of the caller's, or
  the operation's staging).
- SHAPE: the inner dimension K and the columns N (per rank for ``matmul_all_gather``), as
  ``K | N << K_BITS``.

So ranks that call different operations, with different shapes, dtypes or tilings, or with
buffers at different heap offsets, all raise ``CollectiveMismatchError`` naming the field.
"""

from __future__ import annotations

from iris.ccl import protocol

from .config import MAX_BLOCK, MAX_GROUP_M, MAX_PROGRAMS

__all__ = ["KINDS", "K_BITS", "MAX_K", "MAX_N", "MAX_ROWS", "shape_word", "tiles_code"]

#: The operations' kind numbers on the protocol (1-6 are the collectives').
KINDS = {"all_gather_matmul": 7, "matmul_reduce_scatter": 8, "matmul_all_reduce": 9, "matmul_all_gather": 10}
K_BITS = 27
#: The largest inner dimension, columns and rows a description holds.
MAX_K = (1 << K_BITS) - 1
MAX_N = (1 << (55 - K_BITS)) - 1
MAX_ROWS = 2**31 - 1
_SIDE_BITS = 3  # log2(side) - 4 of a tile side in [16, MAX_BLOCK]
_GROUP_SHIFT = 3 * _SIDE_BITS


def tiles_code(block_m: int, block_n: int, block_k: int, group_m: int) -> int:
    """The tiling as the description's source field holds it."""
    code = 0
    for i, side in enumerate((block_m, block_n, block_k)):
        code |= (side.bit_length() - 5) << (i * _SIDE_BITS)
    return code | (group_m - 1) << _GROUP_SHIFT


def _read_tiles(code: int) -> str:
    sides = [1 << (((code >> (i * _SIDE_BITS)) & 7) + 4) for i in range(3)]
    return f"{sides[0]}x{sides[1]}x{sides[2]} tiles, group_m {(code >> _GROUP_SHIFT) + 1}"


def shape_word(k: int, n: int) -> int:
    """The SHAPE word: ``k | n << K_BITS``."""
    return k | n << K_BITS


def _read_shape(word: int) -> str:
    return f"K={word & MAX_K}, N={word >> K_BITS}"


_FIELDS = protocol.KindFields(
    src=("tiling", _read_tiles), layout=("programs", int), numel=("rows of a", int), shape=("inner dim and columns", _read_shape)
)
for _name, _code in KINDS.items():
    protocol.register_kind(_name, _code, _FIELDS)
#: ``matmul_all_gather`` into a stacked (W x M x n) result: ranks that disagree on the result's
#: layout would store into each other's in different places, so it is a variant of its own.
protocol.register_variant("push stacked", 6)
assert MAX_BLOCK == 1 << (4 + (1 << _SIDE_BITS) - 1) and MAX_GROUP_M <= 1 << 8 and MAX_PROGRAMS < 1 << 16
