"""Compile-only checks (no GPU): rank bodies for the ``compiler`` fixture's compiled-mode world
(``TRITON_INTERPRET=0``), where rank r lowers the backend's kernels for ``COMPILE_TARGETS[r]``."""

from __future__ import annotations

import inspect
import re

import triton

# the same import location on triton 3.6 and 3.9
from triton.backends.compiler import GPUTarget

from iris.testing import COMPILE_TARGETS

__all__ = ["TARGETS", "clock_reads", "compile_all", "compile_one", "vector_accesses"]

TARGETS = {"cuda": GPUTarget("cuda", 90, 32), "hip": GPUTarget("hip", "gfx942", 64)}

#: Global loads and stores in each target's assembly, and which assembly.
_ACCESS = {
    "cuda": (r"ld\.global[\.\w]*", r"st\.global[\.\w]*", "ptx"),
    "hip": (r"global_load_\w+|buffer_load_\w+", r"global_store_\w+|buffer_store_\w+", "amdgcn"),
}

#: The instruction that reads the device clock, and the assembly it appears in, per target.
_CLOCK = {"cuda": ("%globaltimer", "ptx"), "hip": ("s_memrealtime", "amdgcn")}


def _aligned(signature):
    """Pointers (and sizes) specialized as divisible by 16, as the launcher does for heap tensors."""
    return {
        (i,): [["tt.divisibility", 16]] for i, t in enumerate(signature.values()) if t.startswith("*") or t == "i32"
    }


def _with_defaults(fn, signature, constexprs):
    """Parameters left out of ``signature`` are constexprs at their defaults (as a launch would pass)."""
    signature, constexprs = dict(signature), dict(constexprs)
    for p in inspect.signature(fn.fn).parameters.values():
        if p.name not in signature:
            assert p.default is not inspect.Parameter.empty, f"{fn.__name__}: no signature for {p.name}"
            signature[p.name] = "constexpr"
            constexprs[p.name] = p.default
    return signature, constexprs


def compile_one(kernels, fn, signature, constexprs, target):
    """``fn`` of the kernels module ``kernels`` lowered for ``target`` (a GPUTarget)."""
    signature, constexprs = _with_defaults(fn, signature, constexprs)
    source = kernels.SOURCE(fn, signature, constexprs, attrs=_aligned(signature))
    return triton.compile(source, target=target, options={"num_warps": kernels.NUM_WARPS})


def compile_all(rank, world_size, backend):
    """(number of cases, failures) for every kernel of the backend's suite on this rank's target."""
    kernels, target = backend.load(), TARGETS[COMPILE_TARGETS[rank]]
    cases = kernels.compile_cases(target)
    failures = []
    for label, fn, signature, constexprs in cases:
        try:
            compile_one(kernels, fn, signature, constexprs, target)
        except Exception as e:  # collect them all, report together
            lines = str(e).strip().splitlines()
            failures.append(f"{label}: {type(e).__name__}: {lines[-1] if lines else ''}")
    return len(cases), failures


def vector_accesses(rank, world_size, backend, dtype):
    """{case: (global load instructions, global store instructions)} of the streaming copies of
    ``dtype`` elements on this rank's target: the plain local copy and each translated operation."""
    kernels, name = backend.load(), COMPILE_TARGETS[rank]
    load_re, store_re, asm = _ACCESS[name]
    out = {}
    for case, fn, signature, constexprs in kernels.stream_cases(dtype, 1024, TARGETS[name]):
        text = compile_one(kernels, fn, signature, constexprs, TARGETS[name]).asm[asm]
        out[case] = (sorted(set(re.findall(load_re, text))), sorted(set(re.findall(store_re, text))))
    return out


def clock_reads(rank, world_size, backend):
    """{case: how many times this rank's target's clock instruction appears} for the kernels that read the clock."""
    kernels, name = backend.load(), COMPILE_TARGETS[rank]
    word, asm = _CLOCK[name]
    return {
        label: compile_one(kernels, fn, signature, constexprs, TARGETS[name]).asm[asm].count(word)
        for label, fn, signature, constexprs in kernels.clock_cases()
    }
