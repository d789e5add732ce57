"""Compile-only checks (no GPU): run in a process with TRITON_INTERPRET=0; every kernel of the
suite is lowered for NVIDIA and AMD targets, with layouts built for each target's warp size."""

import inspect
import re

import triton
from triton.backends.compiler import GPUTarget

from iris.mem.gluon import GluonASTSource

TARGETS = {"cuda": GPUTarget("cuda", 90, 32), "hip": GPUTarget("hip", "gfx942", 64)}


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


def _compile(fn, signature, constexprs, target):
    import _gluon_kernels as K

    signature, constexprs = _with_defaults(fn, signature, constexprs)
    source = GluonASTSource(fn, signature, constexprs, attrs=_aligned(signature))
    return triton.compile(source, target=target, options={"num_warps": K.NUM_WARPS})


def compile_all(rank, world_size, target_name):
    """(number of cases, failures) for every kernel of the suite on ``target_name``."""
    import _gluon_kernels as K

    target = TARGETS[target_name]
    cases = K.compile_cases(target)
    failures = []
    for label, fn, signature, constexprs in cases:
        try:
            _compile(fn, signature, constexprs, target)
        except Exception as e:  # collect them all, report together
            lines = str(e).strip().splitlines()
            failures.append(f"{label}: {type(e).__name__}: {lines[-1] if lines else ''}")
    return len(cases), failures


_ACCESS = {
    "cuda": (r"ld\.global[\.\w]*", r"st\.global[\.\w]*", "ptx"),
    "hip": (r"global_load_\w+|buffer_load_\w+", r"global_store_\w+|buffer_store_\w+", "amdgcn"),
}


def vector_accesses(rank, world_size, target_name, dtype="fp32"):
    """{case: (global load instructions, global store instructions)} for the streaming copies."""
    import _gluon_kernels as K

    target = TARGETS[target_name]
    load_re, store_re, asm = _ACCESS[target_name]
    out = {}
    for name, fn, signature, constexprs in K.stream_cases(dtype, 1024, target):
        text = _compile(fn, signature, constexprs, target).asm[asm]
        out[name] = (sorted(set(re.findall(load_re, text))), sorted(set(re.findall(store_re, text))))
    return out


def warp_sizes_in_ir(rank, world_size, target_name):
    """The threads-per-warp module attribute of a compiled kernel (the layout's warp size was accepted)."""
    import _gluon_kernels as K

    target = TARGETS[target_name]
    name, fn, signature, constexprs = K.stream_cases("fp32", 1024, target)[1]
    ttgir = _compile(fn, signature, constexprs, target).asm["ttgir"]
    return int(re.search(r'"ttg.threads-per-warp" = (\d+)', ttgir).group(1)), constexprs["L"].threads_per_warp[0]


#: The instruction that reads the device clock, and the assembly it appears in, per target.
_CLOCK = {"cuda": ("%globaltimer", "ptx"), "hip": ("s_memrealtime", "amdgcn")}


def clock_reads(rank, world_size, target_name):
    """{case: how many times the target's clock instruction appears} for the kernels that read the clock."""
    import _gluon_kernels as K

    word, asm = _CLOCK[target_name]
    return {
        label: _compile(fn, signature, constexprs, TARGETS[target_name]).asm[asm].count(word)
        for label, fn, signature, constexprs in K.clock_cases()
    }
