"""Compile-only checks of the fused operations' kernels (run with TRITON_INTERPRET=0, no GPU needed).

For either backend (``iris.ops._triton_kernels`` / ``_gluon_kernels``), every kernel is lowered for
a target as a launch would build it: the GPU default tiles of ``iris.ops.config`` for the dtype
and the product path (``product_path``), the backend's ``launch_options`` computed for that
target (Gluon: layouts with its warp size, 32 on cuda and 64 on hip), ``PRECISION`` as the host
derives it (fp32: "ieee" and "tf32", by ``torch.backends.cuda.matmul.allow_tf32``), the unit
strides of contiguous tensors as constexprs (a launch specializes an int equal to 1), and the
description words never specialized. Cases:

- every kernel variant (``GATHER``, ``ALL_REDUCE``) in bf16, fp16, fp32 (IEEE) and fp32 (TF32),
  8 warps, ``TRACE`` off, ``SCOPE`` "sys";
- the same with ``TRACE`` on (bf16 and IEEE fp32), and at ``SCOPE`` "gpu" (fp16);
- every variant with each size equal to 1 (a launch passes them as constexprs: M = W for
  ``matmul_reduce_scatter`` gives ``rows`` 1), in bf16;
- where the default tiles of a dtype have another warp count (Gluon's FMA path: 4), every
  variant with those defaults exactly;
- ``matmul_kernel`` (the GEMM core alone, ``local_matmul``'s baseline), where the backend has it:
  every dtype, and with sizes 1;
- the operand modes the backend's ``operand_modes`` picks for row-major operands of the dtype on
  the target (both backends: TMA descriptors for 16-bit inputs on sm_90, which on Gluon is its
  Hopper path, TMA + wgmma; pointers on gfx942 and for fp32), and every variant in bf16 with both
  operands column-major (descriptors of their transposes on sm_90); on Gluon's wgmma tiles, also
  with pointer operands (its portable path, which operands TMA cannot address take).

``compile_all(rank, world_size, target_name, backend)`` -> ``(count, failures)``; the Gluon
kernels' signatures are also checked to begin with the Triton kernels' parameters, in order.
Compiled for sm_90, every kernel's register spills are checked too (``ptxas -v`` of its PTX, the
assembler Triton itself uses): at most ``SPILL_BOUND`` bytes a thread. Spills were the
reductions' hidden cost twice (0.4-0.9 ms of a 4 ms kernel, BENCHMARKS.md), each time from a
change that compiled and passed every other test.
"""

import contextlib
import importlib
import re
import subprocess
import tempfile

import torch
import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource

from iris.ccl import _internals
from iris.ops import config as _config
from iris.ops import operations
from iris.ops.config import Config

TARGETS = {"cuda": GPUTarget("cuda", 90, 32), "hip": GPUTarget("hip", "gfx942", 64)}
#: Warps per program of the main cases.
WARPS = 8
_TYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}
_OPS = {"bf16": 0, "fp16": 3, "fp32 ieee": 1, "fp32 tf32": 2}  # sum, avg, max, min (protocol.REDUCE_OPS)
_POINTERS = {"a", "b", "c", "g", "out", "partials"}  # of the inputs' dtype
_INT64_POINTERS = {"context_ptr", "sync", "flags"}
_DESC = {"CODE", "NUMEL", "OFF_A", "OFF_B", "SHAPE"}  # do_not_specialize: always i64 words
_SIZES = {"M", "N", "K", "m", "rows"}
#: Strides of contiguous (row-major) tensors' last dimension: 1, so a constexpr at every launch.
_UNIT_STRIDES = {"stride_ak", "stride_bn", "stride_cn", "stride_gk", "stride_on"}
#: The same with the operands column-major (a's and b's unit strides are their rows').
_COLUMN_MAJOR_STRIDES = {"stride_am", "stride_bk", "stride_cn", "stride_gk", "stride_on"}
#: The protocol's constexprs (and the world size, where a kernel unrolls over it); a kernel takes those it has.
_PROTOCOL = {"FLAGS": 4, "SCOPE": "sys", "TRACE": False, "W": 4}
_KERNELS = ("matmul_all_gather_kernel", "all_gather_matmul_kernel", "matmul_reduce_kernel")
#: The GEMM core alone (``local_matmul``'s baseline), where the backend has it.
_CORE = "matmul_kernel"
#: Bytes a thread may spill to local memory (on sm_90; 40 at most today, Triton backend).
SPILL_BOUND = 128


def _spills(kernel, arch: int) -> int:
    """Bytes a thread of compiled ``kernel`` stores to local memory when its PTX is assembled for
    sm_``arch``a (``ptxas -v``, the ptxas Triton uses)."""
    from triton.backends.nvidia.compiler import get_ptxas

    with tempfile.NamedTemporaryFile("w", suffix=".ptx") as f:
        f.write(kernel.asm["ptx"])
        f.flush()
        run = subprocess.run([get_ptxas(arch).path, f"-arch=sm_{arch}a", "-v", f.name, "-o", "/dev/null"],
                             capture_output=True, text=True, check=True)  # fmt: skip
    return sum(int(n) for n in re.findall(r"(\d+) bytes spill stores", run.stderr))


def _kernel_names(K) -> tuple[str, ...]:
    return _KERNELS + ((_CORE,) if hasattr(K, _CORE) else ())


@contextlib.contextmanager
def _tf32(allowed: bool):
    """``torch.backends.cuda.matmul.allow_tf32`` set to ``allowed`` (what PRECISION and the Gluon
    product path follow), restored after."""
    saved = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = allowed
    try:
        yield
    finally:
        torch.backends.cuda.matmul.allow_tf32 = saved


def _aligned(signature):
    return {
        (i,): [["tt.divisibility", 16]]
        for i, (n, t) in enumerate(signature.items())
        if t.startswith("*") or (t == "i32")
    }


def _signature(fn, ty: str, constexprs: dict, ones: bool, units=_UNIT_STRIDES) -> tuple[dict, dict]:
    """The compile signature of ``fn`` for inputs of ``ty`` and the constexprs with the unit
    strides ``units`` (and, with ``ones``, every size as 1) added, as a launch specializes them."""
    constexprs = {**constexprs, **{k: 1 for k in units}}
    if ones:
        constexprs.update({k: 1 for k in _SIZES})
    sig = {}
    for name, is_constexpr, _ in _internals.parameters(fn):
        if is_constexpr or name in constexprs:
            if name not in constexprs:
                raise KeyError(f"{fn.__name__}: no value for constexpr {name}")
            sig[name] = "constexpr"
        elif name in _INT64_POINTERS:
            sig[name] = "*i64"
        elif name in _POINTERS:
            sig[name] = f"*{ty}"
        elif name in _DESC:
            sig[name] = "i64"
        elif name in _SIZES or name.startswith("stride_"):
            sig[name] = "i32"
        else:
            raise KeyError(f"{fn.__name__}: no type for parameter {name}")
    return sig, {k: v for k, v in constexprs.items() if k in sig}


def _variants(K, op: int) -> list[tuple[str, object, dict]]:
    core = [("matmul (core alone)", getattr(K, _CORE), {})] if hasattr(K, _CORE) else []
    return [
        ("matmul_all_gather", K.matmul_all_gather_kernel, {}),
        ("all_gather_matmul", K.all_gather_matmul_kernel, {"GATHER": False}),
        ("all_gather_matmul gather", K.all_gather_matmul_kernel, {"GATHER": True}),
        ("matmul_reduce_scatter", K.matmul_reduce_kernel, {"OP": op, "ALL_REDUCE": False}),
        ("matmul_all_reduce", K.matmul_reduce_kernel, {"OP": op, "ALL_REDUCE": True}),
    ] + core


def _launch(K, backend: str, dtype: torch.dtype, target, tf32: bool, warps: int | None):
    """(constexprs, compile options, warps) of a launch of ``dtype`` inputs on ``target`` with
    the GPU default tiles (``warps`` instead of the default's warps, unless None)."""
    with _tf32(tf32):
        tiles = _config._defaults(backend, dtype, True, K.product_path(target, dtype))
        if warps is not None:
            tiles["num_warps"] = warps
        cfg = Config(backend=backend, **tiles)
        extra = {**K.launch_options(cfg, dtype, target), **_modes(K, target, cfg, dtype, False)}
        shared = dict(BLOCK_M=cfg.block_m, BLOCK_N=cfg.block_n, BLOCK_K=cfg.block_k, GROUP_M=cfg.group_m,
                      PRECISION=operations._precision(dtype))  # fmt: skip
    params = {name for fn_name in _kernel_names(K) for name, _, _ in _internals.parameters(getattr(K, fn_name))}
    constexprs = {**shared, **{k: v for k, v in extra.items() if k in params}}
    options = {k: v for k, v in extra.items() if k not in params}
    return constexprs, options, cfg.num_warps


def _modes(K, target, cfg, dtype, transposed: bool) -> dict:
    """The backend's operand modes for 64 x 64 operands of ``dtype`` (column-major if ``transposed``)."""
    a, b = (torch.empty(64, 64, dtype=dtype) for _ in range(2))
    if transposed:
        a, b = a.t(), b.t()
    return K.operand_modes(target, cfg, a, b, cfg.block_m)


def cases(backend: str, target) -> list[tuple[str, object, dict, dict, dict]]:
    """(label, kernel, signature, constexprs, compile options) of every case for ``target``."""
    K = importlib.import_module(f"iris.ops._{backend}_kernels")
    out = []
    for ty, dtype in _TYPES.items():
        for tf32 in (False, True) if dtype == torch.float32 else (False,):
            kind = f"{ty} {'tf32' if tf32 else 'ieee'}" if dtype == torch.float32 else ty
            constexprs, options, warps = _launch(K, backend, dtype, target, tf32, WARPS)
            with _tf32(tf32):
                mma = K.product_path(target, dtype)
            for name, fn, flags in _variants(K, _OPS[kind]):
                label = f"{name} {kind} ({mma})"
                base = {**constexprs, **flags, **_PROTOCOL}
                runs = [(label, base, False, _UNIT_STRIDES)]
                if fn is getattr(K, _CORE, None):  # no protocol: nothing traced or scoped
                    pass
                elif ty == "bf16" or kind == "fp32 ieee":
                    runs.append((f"{label} traced", {**base, "TRACE": True}, False, _UNIT_STRIDES))
                elif ty == "fp16":
                    runs.append((f"{label} gpu scope", {**base, "SCOPE": "gpu"}, False, _UNIT_STRIDES))
                if ty == "bf16":
                    runs.append((f"{label} sizes 1", base, True, _UNIT_STRIDES))
                    cfg = Config(backend=backend, **_config._defaults(backend, dtype, True, mma))
                    modes = _modes(K, target, cfg, dtype, True)
                    if modes and modes != _modes(K, target, cfg, dtype, False):
                        runs.append((f"{label} column-major operands", {**base, **modes}, False,
                                     _COLUMN_MAJOR_STRIDES))  # fmt: skip
                    if mma == "wgmma":  # operands TMA cannot address: the portable path on the same tiles
                        runs.append((f"{label} pointer operands", {**base, "A_MODE": 0, "B_MODE": 0}, False,
                                     _UNIT_STRIDES))  # fmt: skip
                for run_label, values, ones, units in runs:
                    sig, values = _signature(fn, ty, values, ones, units)
                    out.append((run_label, fn, sig, values, {"num_warps": warps, **options}))
            default, d_options, d_warps = _launch(K, backend, dtype, target, tf32, None)
            if d_warps != WARPS:  # the default tiles exactly (Gluon's FMA path: 4 warps)
                for name, fn, flags in _variants(K, _OPS[kind]):
                    values = {**default, **flags, **_PROTOCOL}
                    sig, values = _signature(fn, ty, values, False)
                    out.append((f"{name} {kind} ({mma}) default tiles, {d_warps} warps", fn, sig, values,
                                {"num_warps": d_warps, **d_options}))  # fmt: skip
    return out


def _signature_mismatches() -> list[str]:
    """The Gluon kernels take the Triton kernels' parameters, in order, then only layout constexprs."""
    T = importlib.import_module("iris.ops._triton_kernels")
    G = importlib.import_module("iris.ops._gluon_kernels")
    bad = [f"{name}: in the triton backend only" for name in _kernel_names(T) if not hasattr(G, name)]
    for name in _KERNELS + ((_CORE,) if hasattr(T, _CORE) and hasattr(G, _CORE) else ()):
        t = [(n, c) for n, c, _ in _internals.parameters(getattr(T, name))]
        g = [(n, c) for n, c, _ in _internals.parameters(getattr(G, name))]
        if g[: len(t)] != t or not all(c for _, c in g[len(t) :]):
            bad.append(f"{name}: the gluon signature {g} does not extend the triton signature {t}")
    return bad


#: The cases CI compiles (a GEMM kernel takes seconds to compile on a CPU core): every kernel
#: variant once in bf16, the reductions with sizes of 1, IEEE fp32 (Gluon's FMA path), tracing,
#: gpu scope and a default-tiles case; ``every=True`` compiles every case.
_CI = ("bf16 (", "matmul_reduce_scatter bf16 (wgmma) sizes 1", "matmul_reduce_scatter bf16 (tl.dot) sizes 1",
       "matmul_all_reduce fp32 ieee", "matmul_all_reduce bf16 (wgmma) traced", "matmul_all_reduce bf16 (tl.dot) traced",
       "matmul_reduce_scatter fp16", "default tiles", "column-major operands", "pointer operands")  # fmt: skip


def _in_ci(label: str) -> bool:
    if "default tiles" in label:
        return label.startswith("matmul_all_reduce")
    if label.endswith("column-major operands"):
        return label.startswith(("matmul_reduce_scatter", "all_gather_matmul bf16"))
    if label.endswith("pointer operands"):
        return label.startswith("matmul_reduce_scatter")
    if label.endswith(("traced", "sizes 1", "gpu scope")):
        return any(label.startswith(p) or p in label for p in _CI[1:])
    return "bf16 (" in label or any(label.startswith(p) for p in _CI[3:])


def compile_all(rank, world_size, target_name, backend, every: bool = False):
    """Compile every case of ``backend`` for ``target_name`` ("cuda": sm_90, "hip": gfx942), or
    CI's selection of them (``every=False``): (number of cases, a line per failure)."""
    if backend == "gluon":
        from iris.mem.gluon import GluonASTSource as Source
    else:
        Source = ASTSource
    target = TARGETS[target_name]
    failures = _signature_mismatches() if backend == "gluon" else []
    all_cases = [c for c in cases(backend, target) if every or _in_ci(c[0])]
    for label, fn, sig, constexprs, options in all_cases:
        try:
            kernel = triton.compile(Source(fn, sig, constexprs, attrs=_aligned(sig)), target=target, options=options)
        except Exception as e:  # noqa: BLE001 - every failure is reported
            failures.append(f"{label}: {type(e).__name__}: {str(e).strip().splitlines()[-1] if str(e).strip() else ''}")
            continue
        if target.backend == "cuda":
            spilled = _spills(kernel, target.arch)
            if spilled > SPILL_BOUND:
                failures.append(f"{label}: spills {spilled} bytes a thread to local memory (at most {SPILL_BOUND})")
    return len(all_cases), failures
