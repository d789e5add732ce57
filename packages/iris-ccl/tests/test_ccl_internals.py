"""iris.ccl._internals: every private torch and Triton internal iris.ccl touches, checked on the
installed releases (the test sessions run Triton 3.6 and 3.9), and each fallback where it is missing."""

import re

import pytest
import torch
import triton

from iris.ccl import _internals, _triton_kernels

GPU = torch.cuda.is_available()
_GATHER = ["context_ptr", "sync", "CODE", "NUMEL", "OFF_A", "OFF_B", "SHAPE", "src", "dst", "piece", "dst_numel",
           "src_stride", "piece_index", "dst_stride", "first_rank", "user", "user_numel", "staged", "RANKS", "FLAGS",
           "BLOCK", "SCOPE", "TRACE"]  # fmt: skip
_CONSTEXPRS = {"RANKS", "FLAGS", "BLOCK", "SCOPE", "TRACE"}


# -- torch ------------------------------------------------------------------------------------------


def test_the_current_device_comes_from_torchs_fast_path_or_its_public_call():
    fast = getattr(torch._C, "_cuda_getDevice", None)
    assert _internals._cuda_get_device is (fast or torch.cuda.current_device)
    if GPU:
        assert _internals.current_device() == torch.cuda.current_device()


def test_the_raw_stream_falls_back_to_the_public_stream_object(monkeypatch):
    class Stream:
        cuda_stream = 1234

    monkeypatch.setattr(torch.cuda, "current_stream", lambda index: Stream())
    assert _internals._public_raw_stream(0) == 1234
    # torch's own function where this torch has it (bound once, at import), else the fallback
    assert _internals.raw_stream is (_internals._cuda_raw_stream or _internals._public_raw_stream)


@pytest.mark.gpu
def test_the_raw_stream_is_the_current_streams_handle():
    s = torch.cuda.Stream()
    with torch.cuda.stream(s):
        assert _internals.raw_stream(torch.cuda.current_device()) == s.cuda_stream


# -- kernels' parameters ----------------------------------------------------------------------------


def _expected_gather():
    return [(name, name in _CONSTEXPRS) for name in _GATHER]


def test_parameters_of_a_triton_kernel_as_this_process_runs_it():
    # interpreted on CPU ranks (the interpreter's function), compiled on a GPU (the JIT's params)
    assert [p[:2] for p in _internals.parameters(_triton_kernels.gather_kernel)] == _expected_gather()


def test_parameters_of_a_gluon_kernel_match_its_triton_twin():
    pytest.importorskip("iris.mem.gluon")
    from iris.ccl import _gluon_kernels

    for name in _triton_kernels.__all__:
        ours = [p[:2] for p in _internals.parameters(getattr(_gluon_kernels, name))]
        assert ours == [p[:2] for p in _internals.parameters(getattr(_triton_kernels, name))], name


def test_parameters_give_defaults_and_name_triton_when_a_kernel_says_nothing():
    @triton.jit
    def kernel(x, n, B: triton.language.constexpr = 4):
        pass

    assert _internals.parameters(kernel) == (
        ("x", False, _internals.NO_DEFAULT),
        ("n", False, _internals.NO_DEFAULT),
        ("B", True, 4),
    )
    with pytest.raises(TypeError, match=re.escape(f"triton {triton.__version__}")):
        _internals.parameters(object())


# -- compiled kernels: checked in compiled-mode processes (no GPU needed to compile) ----------------


def _runner_calls(rank, world_size):
    """How Triton's own runner (``compiled[grid](*args, stream=)``) and ``bare_launcher`` call a
    compiled kernel's launcher, recorded (the kernel is compiled, not loaded: no GPU)."""
    import _ccl_compile
    from triton.compiler import ASTSource

    from iris.ccl import _internals, _triton_kernels
    from iris.testing import COMPILE_TARGETS

    source = ASTSource(_triton_kernels.barrier_kernel, {**_ccl_compile._HEAD, "FLAGS": "constexpr", "SCOPE": "constexpr",
                       "TRACE": "constexpr"}, {"FLAGS": 4, "SCOPE": "sys", "TRACE": False})  # fmt: skip
    compiled = triton.compile(source, target=_ccl_compile.TARGETS[COMPILE_TARGETS[rank]])
    calls = []
    compiled.module, compiled.function = "loaded", "the function"  # as if loaded: nothing touches a device
    compiled._run = lambda *a: calls.append(a)
    fields = {a: hasattr(compiled, a) for a in ("run", "function", "packed_metadata", "_init_handles", "metadata")}
    fields["metadata.shared"] = hasattr(compiled.metadata, "shared")
    try:
        args = (1, 2, 3, 4, 5, 6, 7)
        compiled[(2, 1, 1)](*args, stream=77)
        run, fixed = _internals.bare_launcher(compiled)
        run(2, 1, 1, 77, *fixed, *args)
    finally:
        compiled.module = None  # nothing to unload
    return fields, calls


def test_bare_launches_call_the_launcher_as_tritons_own_runner_does(compiler):
    for fields, (theirs, ours) in compiler.run(_runner_calls):
        assert all(fields.values()), fields
        # grid, stream, function, packed metadata, then (metadata, enter hook, exit hook) that the
        # bare launch leaves out, then the kernel's arguments
        assert ours[:6] == theirs[:6] and ours[9:] == theirs[9:] == (1, 2, 3, 4, 5, 6, 7), (theirs, ours)
        assert ours[6:9] == (None, None, None)


def _description_types(rank, world_size):
    """The types the JIT gives the description's arguments of every collective kernel (both
    backends where Gluon is installed) at a small and at a 64-bit value: {(kernel, argument, value): type}."""
    import _ccl_compile
    from triton.compiler.compiler import make_backend
    from triton.runtime.jit import create_function_from_signature

    from iris.ccl import _triton_kernels, protocol
    from iris.testing import COMPILE_TARGETS

    modules = [_triton_kernels]
    try:
        from iris.ccl import _gluon_kernels

        modules.append(_gluon_kernels)
    except ImportError:
        pass
    backend = make_backend(_ccl_compile.TARGETS[COMPILE_TARGETS[rank]])
    types = {}
    for module in modules:
        for name in ("barrier_kernel", "reduce_kernel", "gather_kernel", "push_kernel"):
            kernel = getattr(module, name)
            bind = create_function_from_signature(kernel.signature, kernel.params, backend)
            for value in (5, 2**40):
                args = {p.name: (4 if p.is_constexpr else value if p.name in protocol.DESC_ARGS else 3)
                        for p in kernel.params}  # fmt: skip
                params, specialization, _ = bind(**args)
                for arg, spec in zip(params, specialization):
                    if arg in protocol.DESC_ARGS:
                        types[(f"{module.__name__}.{name}", arg, value)] = spec[0]
    return types


def test_the_description_is_int64_at_any_value_so_a_large_code_compiles_nothing_more(compiler):
    """A CODE past 2**31 (a channels-last input) once made every kernel compile again with an
    i64 CODE; the kernels declare the description's arguments int64 (``protocol.typed``)."""
    for types in compiler.run(_description_types):
        kernels = {kernel for kernel, _, _ in types}
        assert len(kernels) >= 4 and len(types) == len(kernels) * 5 * 2, types  # 5 arguments at 2 values
        assert set(types.values()) == {"i64"}, types


def test_a_kernel_not_loaded_or_without_a_launcher_has_no_bare_launch():
    class NotLoaded:
        run, function, packed_metadata = None, None, b""

    assert _internals.bare_launcher(NotLoaded()) is None
    assert _internals.bare_launcher(object()) is None
    with pytest.raises(TypeError, match="launcher by grid"):
        _internals.run_compiled(object(), (1, 1, 1), (), 0)


def test_resources_load_the_kernel_and_read_registers_and_shared_memory():
    class Compiled:
        class metadata:  # noqa: N801 - Triton's field name
            shared = 1024

        def _init_handles(self):
            self.n_regs = 40

    assert _internals.resources(Compiled()) == (40, 1024)
    assert _internals.resources(object()) is None


# -- launch hooks -----------------------------------------------------------------------------------


def test_launch_hooks_are_seen_while_installed():
    from triton import knobs

    assert _internals.launch_hooks_idle()

    def hook(metadata):
        pass

    knobs.runtime.launch_enter_hook.add(hook)
    try:
        assert not _internals.launch_hooks_idle()
    finally:
        knobs.runtime.launch_enter_hook.remove(hook)
    assert _internals.launch_hooks_idle()


def test_a_hook_assigned_in_place_of_the_chain_is_seen(monkeypatch):
    """The fast check reads the chains' ``calls``; a plain function (or None) put in a chain's place
    takes the careful path."""
    from triton import knobs

    monkeypatch.setattr(knobs.runtime, "launch_enter_hook", lambda metadata: None)
    assert not _internals.launch_hooks_idle()
    monkeypatch.setattr(knobs.runtime, "launch_enter_hook", None)
    assert _internals.launch_hooks_idle()


def test_a_triton_that_does_not_say_counts_as_hooked(monkeypatch):
    from triton import knobs

    monkeypatch.delattr(type(knobs.runtime), "launch_exit_hook")
    assert not _internals.launch_hooks_idle()


# -- Gluon: the compile target's warp size (iris.mem.common.target.target_builtin) ---------------------


class _Semantic:
    def __init__(self, **options):
        self.builder = type("Builder", (), {"options": type("Options", (), options)()})()


def test_gluon_tiles_take_the_targets_warp_size():
    pytest.importorskip("iris.mem.gluon")
    import triton.language as tl

    from iris.ccl import protocol_gluon

    for warp in (32, 64):
        got = protocol_gluon.tile_layout(4096, 8, tl.float16, _semantic=_Semantic(warp_size=warp)).value
        assert list(got.threads_per_warp) == [warp] and list(got.warps_per_cta) == [8]
        assert list(got.size_per_thread) == [8]  # one 16-byte vector of fp16 per thread and pass
