"""Compile-only checks (no GPU): run in a process with TRITON_INTERPRET=0, where @triton.jit
functions are compilable; every kernel of the suite is lowered for NVIDIA and AMD targets."""

import inspect
import re

import triton

# the same import locations on triton 3.6 and 3.9
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource

TARGETS = {"cuda": GPUTarget("cuda", 90, 32), "hip": GPUTarget("hip", "gfx942", 64)}


def _aligned(signature):
    """Pointers (and sizes) specialized as divisible by 16, as the launcher does for heap tensors."""
    return {
        (i,): [["tt.divisibility", 16]] for i, t in enumerate(signature.values()) if t.startswith("*") or t == "i32"
    }


def _complete(fn, signature, constexprs):
    """Add the constexpr parameters left at their defaults (ASTSource needs every parameter)."""
    params = inspect.signature(fn.fn).parameters
    signature, constexprs = dict(signature), dict(constexprs)
    for name in fn.arg_names:
        if name not in signature:
            signature[name] = "constexpr"
            constexprs.setdefault(name, params[name].default)
    return signature, constexprs


def compile_one(fn, signature, constexprs, target):
    signature, constexprs = _complete(fn, signature, constexprs)
    return triton.compile(ASTSource(fn, signature, constexprs, attrs=_aligned(signature)), target=target)


def compile_all(rank, world_size, target_name):
    import _triton_kernels as K

    target = TARGETS[target_name]
    failures = []
    for label, fn, signature, constexprs in K.compile_cases():
        try:
            compile_one(fn, signature, constexprs, target)
        except Exception as e:  # collect them all, report together
            failures.append(f"{label}: {type(e).__name__}: {str(e).strip().splitlines()[-1] if str(e).strip() else ''}")
    return len(K.compile_cases()), failures


_ACCESS = {
    "cuda": (r"ld\.global[\.\w]*", r"st\.global[\.\w]*", "ptx"),
    "hip": (r"global_load_\w+|buffer_load_\w+", r"global_store_\w+|buffer_store_\w+", "amdgcn"),
}


def vector_accesses(rank, world_size, target_name, dtype="fp32"):
    """{case: (global load instructions, global store instructions)} for the streaming copies."""
    import _triton_kernels as K

    target = TARGETS[target_name]
    load_re, store_re, asm = _ACCESS[target_name]
    out = {}
    for name, fn, signature, constexprs in K.stream_cases(dtype, 1024):
        compiled = compile_one(fn, signature, constexprs, target)
        text = compiled.asm[asm]
        out[name] = (sorted(set(re.findall(load_re, text))), sorted(set(re.findall(store_re, text))))
    return out


#: The instruction that reads the device clock, and the assembly it appears in, per target.
_CLOCK = {"cuda": ("%globaltimer", "ptx"), "hip": ("s_memrealtime", "amdgcn")}


def clock_reads(rank, world_size, target_name):
    """{case: how many times the target's clock instruction appears} for the kernels that read the clock."""
    import _triton_kernels as K

    word, asm = _CLOCK[target_name]
    return {
        label: compile_one(fn, signature, constexprs, TARGETS[target_name]).asm[asm].count(word)
        for label, fn, signature, constexprs in K.clock_cases()
    }
