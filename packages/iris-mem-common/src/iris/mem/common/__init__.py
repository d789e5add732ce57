"""What both device layers need from Triton beyond its stable API, written once for both: the
spellings that differ between triton 3.6 and 3.9, and the scoped changes to Triton's interpreter
that CPU ranks need. For ``iris.mem.triton`` and ``iris.mem.gluon`` only; not a user API.

Why a distribution of its own: the two mem layers may import neither each other nor triton through
iris-heap (``iris.heap`` never imports triton: it serves users without it), so code both use lives
here, the one distribution both depend on besides iris-heap. It imports triton only inside its
functions, so importing it has no effect on anything (tested). It is an interface between
distributions: it keeps its names within a minor release, the range the mem layers declare.

**The fence.** Every private Triton internal the mem layers share is reached through
:mod:`iris.mem.common.target`, whose docstring tables each (what it reaches into, what happens
where it is missing): the compile target as device code reads it (``target_builtin``,
``target_of``), the interpreter probe (``target.INTERPRETED``), the one
``InterpreterAtomicError`` with its per-layer dtype table, the clock and multiprocessor-id
assembly per target, and the release differences (triton 3.6 -> 3.9), re-exported here: :func:`aggregate`, :func:`gluon_ast_source`, :func:`gluon_has_barrier`,
:func:`gluon_has_tma_async_load`. Each mem layer's own ``_internals`` tables what is its alone.

**Interpreter patches** (both releases; this module is their fence, ``target``'s table lists them):

* :data:`ONE_PATCH_PER_LAUNCH`: both releases' interpreters patch ``triton.language`` anew at
  every call of a ``@jit`` device function, a scan of the language's members that dominated a
  CPU-rank collective's time (CHANGELOG). Inside the scope a launch patches ``triton.language``
  and its ``core`` once, and the calls inside it find them patched, as CPU launches of Gluon
  kernels already did.
* :data:`SCALAR_INDEX`: 3.6's interpreter turns a scalar into a Python int with ``int(data)``,
  which numpy >= 2.4 refuses for its shape-(1,) scalars (every scalar argument and every value
  loaded through one), so ``for r in range(world_size)`` fails; 3.9 squeezes first. Found by
  probing the installed interpreter, not by its version.

**Scoped patches.** Importing an Iris package changes nothing outside it (each layer's
``iris.testing.side_effects`` check). What Iris
must change in Triton to run kernels on CPU ranks is a :class:`Patches`: installed when the first
thread enters it, restored (the very objects that were there, or their absence) when the last
thread leaves, on every path out, exceptions included. Each patched function acts only for the
threads inside and behaves as the original for every other thread. A layer's public scope is a
:class:`Scope` subclass (``iris.mem.gluon.interpret``, ``iris.mem.triton.interpret``): a context
manager, a decorator of host functions, and a decorator of kernels whose launches enter it.
Triton's interpreter itself replaces ``triton.language`` process-wide while a launch runs, so two
threads must not run interpreted launches at once, with or without Iris (CPU ranks are
processes, never threads of one).
"""

from __future__ import annotations

import contextlib
import functools
import threading
from types import SimpleNamespace

from . import target
from .target import aggregate, gluon_ast_source, gluon_has_barrier, gluon_has_tma_async_load

__version__ = "0.2.0"

__all__ = [
    "ONE_PATCH_PER_LAUNCH",
    "POLLS_PER_CLOCK",
    "SCALAR_INDEX",
    "Patches",
    "Saved",
    "Scope",
    "aggregate",
    "gluon_ast_source",
    "gluon_has_barrier",
    "gluon_has_tma_async_load",
    "both_languages",
    "target",
]

_MISSING = object()

#: Polls of a compiled bounded wait between two readings of the device clock and the error word
#: (``polls_per_clock()`` of both mem layers; CPU ranks read them every poll). Reading them is a
#: reduction across the program's warps (two barriers, a volatile load), which cost a 1 KiB
#: all_reduce's graph replay about 1 us when done every poll (the iris-ccl CHANGELOG, "A compiled
#: entry or exit wait reads the clock every 8th poll"); a
#: bound in seconds is then met a few microseconds late at most.
POLLS_PER_CLOCK = 8


# -- scoped patches --------------------------------------------------------------------------------


class Saved:
    """Attributes set through :meth:`set`, and what was there before (restored in reverse order)."""

    def __init__(self):
        self._changes = []

    def set(self, obj, name, value) -> None:
        self._changes.append((obj, name, vars(obj).get(name, _MISSING)))
        setattr(obj, name, value)

    def restore(self) -> None:
        while self._changes:
            obj, name, old = self._changes.pop()
            if old is _MISSING:
                delattr(obj, name)  # it was inherited (or absent): lookups find the original again
            else:
                setattr(obj, name, old)


class Patches:
    """A set of attribute replacements held while any thread is inside it (re-entrant, counted).

    ``install(set_attr)`` makes the replacements through ``set_attr(obj, name, value)``; it runs
    when the first thread enters, and everything it set is restored when the last one leaves (or
    at once, if ``install`` itself fails). The replacements ask :meth:`inside` whether to act for
    the calling thread.
    """

    def __init__(self, name: str, install):
        self.name = name
        self._install = install
        self._lock = threading.Lock()
        self._holders = 0
        self._saved = Saved()
        self._local = threading.local()

    def inside(self) -> bool:
        """Whether the calling thread is inside this set."""
        return getattr(self._local, "depth", 0) > 0

    def enter(self) -> None:
        with self._lock:
            if self._holders == 0:
                try:
                    self._install(self._saved.set)
                except BaseException:
                    self._saved.restore()
                    raise
            self._holders += 1
        self._local.depth = getattr(self._local, "depth", 0) + 1

    def exit(self) -> None:
        self._local.depth -= 1
        with self._lock:
            self._holders -= 1
            if self._holders == 0:
                self._saved.restore()

    def __repr__(self) -> str:
        return f"Patches({self.name!r}, holders={self._holders})"


class Scope(contextlib.ContextDecorator):
    """Base of a layer's public CPU-execution scope; a subclass names its :class:`Patches`.

    * ``with scope():`` -- inside, this thread's launches run with the patches (when
      ``TRITON_INTERPRET=1``; otherwise entering changes nothing and kernels compile as usual);
    * ``@scope()`` on a host function -- the function runs inside;
    * ``@scope()`` on a ``@jit`` kernel -- every launch ``kernel[grid](...)`` of that kernel runs
      inside (the kernel object is returned, unchanged unless ``TRITON_INTERPRET=1`` when the
      decorator runs, as for ``@triton.jit``).

    Re-entrant, per thread; nested and concurrent scopes install the patches once.
    """

    patches: tuple = ()
    _threads = threading.local()

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        cls._threads = threading.local()  # per class: the entries of each thread, innermost last

    @classmethod
    def _entries(cls) -> list:
        entries = getattr(cls._threads, "entries", None)
        if entries is None:
            entries = cls._threads.entries = []
        return entries

    @classmethod
    def entered(cls) -> bool:
        """Whether the calling thread is inside a scope of this kind."""
        return bool(cls._entries())

    def __enter__(self):
        entered = []
        if target.interpreted():
            try:
                for patches in self.patches:
                    patches.enter()
                    entered.append(patches)
            except BaseException:
                for patches in reversed(entered):
                    patches.exit()
                raise
        self._entries().append(entered)
        return self

    def __exit__(self, *exc) -> bool:
        for patches in reversed(self._entries().pop()):
            patches.exit()
        return False

    def __call__(self, fn):
        if target.is_kernel(fn):
            return self._launch_inside(fn)
        return super().__call__(fn)

    def _launch_inside(self, kernel):
        if not target.interpreted():
            return kernel
        scope, outer = type(self), vars(kernel).get("run")

        def run(*args, **kwargs):  # what kernel[grid](...) calls
            with scope():
                if outer is not None:  # the kernel was given another scope too: both apply
                    return outer(*args, **kwargs)
                return type(kernel).run(kernel, *args, **kwargs)

        kernel.run = run
        return kernel


# -- the scalar index fix (triton 3.6 with numpy >= 2.4) ------------------------------------------


def _scalar_index(self):
    data = self.handle.data
    return int(data.reshape(-1)[0]) if data.size == 1 else int(data)


@functools.cache
def _index_needs_fix(patch_lang_tensor) -> bool:
    """Whether the interpreter's ``__index__`` for tensors fails on a shape-(1,) scalar: its
    ``_patch_lang_tensor`` is run against a stand-in class and a scope that only records."""
    import numpy as np

    class Probe:
        pass

    class Recorder:
        index = None

        def set_attr(self, obj, name, value):
            if obj is Probe and name == "__index__":
                self.index = value

    recorder = Recorder()
    try:
        patch_lang_tensor(Probe, recorder)
    except Exception:  # an interpreter unlike the known ones: leave it alone
        return False
    if recorder.index is None:
        return False
    try:
        return recorder.index(SimpleNamespace(handle=SimpleNamespace(data=np.array([3])))) != 3
    except TypeError:
        return True


def _install_scalar_index(set_attr) -> None:
    from triton.runtime import interpreter

    original = interpreter._patch_lang_tensor
    if not _index_needs_fix(original):
        return

    def _patch_lang_tensor(tensor, scope):
        original(tensor, scope)
        if SCALAR_INDEX.inside():
            scope.set_attr(tensor, "__index__", _scalar_index)

    set_attr(interpreter, "_patch_lang_tensor", _patch_lang_tensor)


#: Scalars as ``range`` bounds in interpreted kernels (triton 3.6 with numpy >= 2.4); empty on
#: interpreters that need no fix.
SCALAR_INDEX = Patches("scalar tensors as Python ints (triton 3.6, numpy >= 2.4)", _install_scalar_index)


# -- one patch of the language per launch (both releases) -----------------------------------------


def both_languages():
    """A stand-in for a kernel function whose globals show the interpreter ``triton.language``
    and ``triton.language.core``: what its language patching reads of a function (``__globals__``)."""
    import triton.language as tl

    return SimpleNamespace(__globals__={"tl": tl, "core": tl.core})


class _LaunchPatch:
    """The patch of a launch (the interpreter's own scope object), and the mark that a launch is running."""

    def __init__(self, scope, state):
        self._scope, self._state = scope, state

    def restore(self) -> None:
        try:
            self._scope.restore()
        finally:
            self._state.launch = False


def _install_one_patch_per_launch(set_attr) -> None:
    from triton.runtime import interpreter

    original = interpreter._patch_lang
    state = threading.local()

    def _patch_lang(fn):
        # The launch (GridExecutor) asks first and restores what it gets when it ends; device
        # functions called inside it ask again at every call and drop what they get.
        if not ONE_PATCH_PER_LAUNCH.inside():
            return original(fn)
        if getattr(state, "launch", False):
            return Saved()  # a device-function call inside a launch: the launch patched both
        scope = original(both_languages())
        state.launch = True
        return _LaunchPatch(scope, state)

    set_attr(interpreter, "_patch_lang", _patch_lang)


#: ``triton.language`` patched once per interpreted launch, not at every device-function call.
ONE_PATCH_PER_LAUNCH = Patches("triton.language patched once per interpreted launch", _install_one_patch_per_launch)
