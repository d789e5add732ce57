"""Compile-only: every Gluon kernel of the suite lowers for NVIDIA (sm_90, 32-thread warps) and
AMD (gfx942, 64-thread warps) without a GPU, the translated copies keep 16-byte vector accesses,
and the device clock is each target's timer."""

import _gluon_compile as comp
import pytest

TARGETS = ["cuda", "hip"]


@pytest.mark.parametrize("target", TARGETS)
def test_every_kernel_compiles_for_the_target(compiler, target):
    (result,) = compiler.run(comp.compile_all, target, timeout=1200)
    count, failures = result
    assert count > 100
    assert not failures, f"{len(failures)} of {count} kernels failed to compile for {target}:\n" + "\n".join(failures)


@pytest.mark.parametrize("target", TARGETS)
def test_layouts_carry_the_targets_warp_size(compiler, target):
    (result,) = compiler.run(comp.warp_sizes_in_ir, target)
    module_warp, layout_warp = result
    want = {"cuda": 32, "hip": 64}[target]
    assert module_warp == layout_warp == want


@pytest.mark.parametrize("target", TARGETS)
def test_translated_accesses_stay_16_byte_vectors(compiler, target):
    (accesses,) = compiler.run(comp.vector_accesses, target)
    local_loads, local_stores = accesses["local"]
    vector = {"cuda": ".v4", "hip": "dwordx4"}[target]
    assert any(vector in a for a in local_loads) and any(vector in a for a in local_stores), accesses["local"]
    local_data_loads = [a for a in local_loads if not a.endswith(".b64")]  # (64-bit: the context's words)
    for op, (loads, stores) in accesses.items():
        data_loads = [a for a in loads if not a.endswith(".b64")]  # (and the heap bases)
        assert data_loads == local_data_loads and stores == local_stores, (
            f"{op}: {loads} {stores}, local: {local_loads} {local_stores}"
        )


@pytest.mark.parametrize("target", TARGETS)
def test_the_device_clock_is_the_targets_timer(compiler, target):
    """clock_ns (and the bounded wait, which reads it every poll) read %globaltimer on NVIDIA and
    s_memrealtime on AMD, told apart by the compile target, not by a driver (there is none here)."""
    (reads,) = compiler.run(comp.clock_reads, target)
    word = {"cuda": "%globaltimer", "hip": "s_memrealtime"}[target]
    assert reads["clock[free=False]"] >= 1 and reads["clock[free=True]"] >= 1, f"{target}: {reads}"
    # record_error_kernel: the wait's start and its poll loop, and the two aux readings
    for case in ("record_error[free=False]", "record_error[free=True]"):
        assert reads[case] >= 3, f"{target} {case}: {word} appears {reads[case]} times"
