"""Every private torch or Triton internal that iris.examples touches, behind a feature check.

The examples use public APIs and these functions only, so a release that moves one of them
breaks one function here, with an error naming the release. ``tests/test_internals.py`` checks
each on the installed releases (Triton 3.6 and 3.9 in the test sessions).

===================  =====================================================  =============================
function             what it reaches into                                   where it is missing
===================  =====================================================  =============================
``spin``             ``torch.cuda._sleep``: a kernel that spins for a       ``RuntimeError`` naming torch
                     number of GPU clock cycles                             (``time_launches`` can run
                                                                            with ``queued=False``)
===================  =====================================================  =============================

(``triton.runtime.driver.active.get_current_target()``, which the GEMM example reads, is how
Triton's own tutorials ask for the target: public enough to call where it is needed.)
"""

from __future__ import annotations

import torch

__all__ = ["has_spin", "spin"]


def has_spin() -> bool:
    """Whether this torch can queue a spinning kernel (``spin``)."""
    return callable(getattr(torch.cuda, "_sleep", None))


def spin(cycles: int) -> None:
    """Queue a kernel that spins for ``cycles`` GPU clock cycles on the current CUDA stream."""
    if not has_spin():
        raise RuntimeError(
            f"torch {torch.__version__} has no torch.cuda._sleep, the spinning kernel that queued timing "
            "puts ahead of the timed calls; time with time_launches(..., queued=False) instead"
        )
    torch.cuda._sleep(int(cycles))
