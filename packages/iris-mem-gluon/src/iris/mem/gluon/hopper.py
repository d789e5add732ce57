"""Hopper's TMA copies under one spelling for every supported Triton, for ``@gluon.jit`` kernels.

>>> from iris.mem.gluon import hopper as hp
>>> hp.tma_load(a_desc, [off_m, k], bar, a_smem, pred)     # global -> shared, completes on bar
>>> hp.tma_store(c_desc, [off_m, off_n], c_smem)           # shared -> global

Triton 3.9 renamed ``tma.async_copy_global_to_shared`` / ``async_copy_shared_to_global`` to
``tma.async_load`` / ``tma.async_store`` and made the old names raise
(``iris.mem.common.gluon_has_tma_async_load``); these call whichever the installed release has.
Everything else of Hopper's Gluon API (``tma.make_tensor_descriptor``, ``tma.store_wait``,
``mbarrier``, ``warpgroup_mma``, ``fence_async_shared``) is spelled alike on both and is used
directly. On CPU ranks (:class:`iris.mem.gluon.interpret`) all of them have CPU meanings: a copy
completes when its call returns, mbarriers and fences do nothing, ``warpgroup_mma`` is a dot.
"""

from triton.experimental import gluon
from triton.experimental.gluon.language.nvidia.hopper import tma

from iris.mem import common as _common

__all__ = ["tma_load", "tma_store"]

# Defined once per spelling: Triton's dependency scan resolves every attribute a function names,
# even in a branch a constexpr leaves out, and the old names are gone from 3.9 (the new from 3.6).
if _common.gluon_has_tma_async_load():

    @gluon.jit
    def tma_load(tensor_desc, coord, barrier, result, pred=True):
        """The tile of ``tensor_desc`` at ``coord`` into shared memory ``result``; ``barrier`` (an
        mbarrier expecting its bytes) completes when it has arrived. Skipped where ``pred`` is false."""
        tma.async_load(tensor_desc, coord, barrier, result, pred)

    @gluon.jit
    def tma_store(tensor_desc, coord, src):
        """Shared memory ``src`` into the tile of ``tensor_desc`` at ``coord`` (``tma.store_wait``
        waits for it)."""
        tma.async_store(tensor_desc, coord, src)

else:

    @gluon.jit
    def tma_load(tensor_desc, coord, barrier, result, pred=True):  # as above, in 3.6's spelling
        tma.async_copy_global_to_shared(tensor_desc, coord, barrier, result, pred)

    @gluon.jit
    def tma_store(tensor_desc, coord, src):  # as above, in 3.6's spelling
        tma.async_copy_shared_to_global(tensor_desc, coord, src)
