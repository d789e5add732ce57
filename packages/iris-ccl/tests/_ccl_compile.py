"""Compile-only checks of the collectives' kernels (run with TRITON_INTERPRET=0, no GPU needed)."""

import importlib

import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource

from iris.ccl.call import Push

TARGETS = {"cuda": GPUTarget("cuda", 90, 32), "hip": GPUTarget("hip", "gfx942", 64)}
_HEAD = {
    "context_ptr": "*i64",
    "sync": "*i64",
    "CODE": "i64",
    "NUMEL": "i64",
    "OFF_A": "i64",
    "OFF_B": "i64",
    "SHAPE": "i64",
}
_REDUCE_FLAGS = {
    "W": "constexpr",
    "OP": "constexpr",
    "ACC_F32": "constexpr",
    "IS_FLOAT": "constexpr",
    "FLAGS": "constexpr",
    "BLOCK": "constexpr",
    "SCOPE": "constexpr",
    "TRACE": "constexpr",
}


def _aligned(signature):
    return {
        (i,): [["tt.divisibility", 16]]
        for i, (n, t) in enumerate(signature.items())
        if t.startswith("*") or (t == "i32")
    }


def cases(K):
    out = [("barrier", K.barrier_kernel, {**_HEAD, "FLAGS": "constexpr", "SCOPE": "constexpr", "TRACE": "constexpr"},
            {"FLAGS": 4, "SCOPE": "sys", "TRACE": False})]  # fmt: skip
    for dt, op, acc, is_float in [
        ("fp32", 0, False, True),
        ("fp64", 3, False, True),
        ("bf16", 1, True, True),
        ("fp16", 3, True, True),
        ("i32", 2, False, False),
    ]:
        flags = {
            "W": 4,
            "OP": op,
            "ACC_F32": acc,
            "IS_FLOAT": is_float,
            "FLAGS": 4,
            "BLOCK": 4096,
            "SCOPE": "sys",
            "TRACE": False,
        }
        sig = {**_HEAD, "src": f"*{dt}", "dst": f"*{dt}", "N": "i32", "chunk_index": "i32", "chunk": "i32",
               "user": f"*{dt}", "staged": "i32"}  # fmt: skip
        # one_shot (every element, local dst), two_shot (pushed), rs_ag's first half and reduce_scatter;
        # staging inside the kernel (a small tensor off the heap) is the runtime argument ``staged``, the
        # two-shot's copy back the constexpr ``COPY_BACK``
        for push, chunked, back in [(False, True, False), (True, True, False), (False, False, False),
                                    (True, True, True)]:  # fmt: skip
            out.append((f"reduce {dt} op{op} push={push} chunked={chunked}" + " copy_back" * back, K.reduce_kernel,
                        {**sig, "PUSH": "constexpr", "DST_CHUNKED": "constexpr", "COPY_BACK": "constexpr",
                         **_REDUCE_FLAGS},
                        {"PUSH": push, "DST_CHUNKED": chunked, "COPY_BACK": back, **flags}))  # fmt: skip
        # the pushing one-shot: one program, the slots' check as the runtime argument ``verified``
        out.append((f"push_reduce {dt} op{op}", K.push_reduce_kernel,
                    {**_HEAD, "src": f"*{dt}", "dst": f"*{dt}", "slots": f"*{dt}", "N": "i32", "slot": "i32",
                     "verified": "i32", **_REDUCE_FLAGS}, {**flags, "BLOCK": 2048}))  # fmt: skip
    for dt in ("u8", "i16", "i32", "i64"):
        ints = {k: "i32" for k in "piece dst_numel src_stride piece_index dst_stride first_rank".split()}
        tail = {"FLAGS": "constexpr", "BLOCK": "constexpr", "SCOPE": "constexpr", "TRACE": "constexpr"}
        out.append((f"gather {dt}", K.gather_kernel,
                    {**_HEAD, "src": f"*{dt}", "dst": f"*{dt}", **ints, "user": f"*{dt}", "user_numel": "i32",
                     "staged": "i32", "RANKS": "constexpr", **tail},
                    {"RANKS": 4, "FLAGS": 4, "BLOCK": 4096, "SCOPE": "sys", "TRACE": False}))  # fmt: skip
        # push: all_gather's (SAME) for every word size; all_to_all's (CHUNKS) and broadcast's relay for one
        for mode in [Push.SAME] + ([Push.CHUNKS, Push.RELAY] if dt == "i32" else []):
            label = f"push {dt}" + ("" if mode == Push.SAME else f" mode{mode}")
            out.append((label, K.push_kernel, {**_HEAD, "src": f"*{dt}", "dst": f"*{dt}", "n": "i32",
                        "chunk_index": "i32", "dst_numel": "i32", "src_rank": "i32", "W": "constexpr",
                        "MODE": "constexpr", **tail},
                        {"W": 4, "MODE": mode, "FLAGS": 4, "BLOCK": 4096, "SCOPE": "sys", "TRACE": False}))  # fmt: skip
    # Config(trace=True): one of each kernel with its phases recorded
    traced = {"barrier", "reduce bf16 op1 push=True chunked=True", "gather i32", "push i16", "push_reduce fp32 op0"}
    out += [(f"{label} traced", fn, sig, {**c, "TRACE": True}) for label, fn, sig, c in out if label in traced]
    # every rank on one device: the protocol's atomics at gpu scope (iris.ccl.workspace)
    one_device = {"barrier", "reduce fp32 op0 push=True chunked=True", "gather i32", "push_reduce bf16 op1"}
    out += [(f"{label} gpu scope", fn, sig, {**c, "SCOPE": "gpu"}) for label, fn, sig, c in out if label in one_device]
    return out


def compile_all(rank, world_size, target_name, backend, part=0, parts=1):
    """Compile ``cases``' part ``part`` of ``parts`` (every ``parts``-th case from ``part``) for
    ``target_name``: ``(cases compiled, failures)``."""
    K = importlib.import_module(f"iris.ccl._{backend}_kernels")
    if backend == "gluon":
        from iris.mem.gluon import GluonASTSource as Source
    else:
        Source = ASTSource
    failures, all_cases = [], cases(K)[part::parts]
    for label, fn, sig, constexprs in all_cases:
        try:
            triton.compile(
                Source(fn, sig, constexprs, attrs=_aligned(sig)), target=TARGETS[target_name], options={"num_warps": 8}
            )
        except Exception as e:  # noqa: BLE001 - every failure is reported
            failures.append(f"{label}: {type(e).__name__}: {str(e).strip().splitlines()[-1] if str(e).strip() else ''}")
    return len(all_cases), failures
