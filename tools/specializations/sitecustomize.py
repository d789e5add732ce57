"""Count the kernel specializations that CPU ranks launch: a proxy for what a GPU run compiles.

With ``IRIS_SPEC_LOG=DIR`` and this folder on ``PYTHONPATH`` (``tools/specializations/count.sh``
does both), every process (pytest's and every rank's it spawns) appends each distinct launch key of
an interpreted kernel (Triton's or Gluon's, ``TRITON_INTERPRET=1``) to ``DIR/<pid>.tsv``: the
kernel, the key and the test code that launched it (the innermost caller in a ``tests`` folder).
The key follows Triton's specialization: constexpr values, each tensor's dtype and 16-byte
alignment, each int's ``== 1`` / ``% 16 == 0`` / 32-bit range unless the kernel names it in
``do_not_specialize`` (then only the range; an int annotated with its type, ``"i64"``, has that
type whatever its value), ``num_warps`` and the other launch options. A GPU
compiles a key once per cache; CPU ranks see more distinct keys than a GPU compiles (their
tensors' alignment differs), so compare counts of one kind only. ``summary.py DIR`` tabulates.

Importing triton here would break tests that check what importing iris loads, so the hook waits
for ``triton.runtime.interpreter`` to be imported and patches it then.
"""

import os

_LOG = os.environ.get("IRIS_SPEC_LOG")


def _install() -> None:
    import importlib.abc
    import importlib.util
    import sys

    patches = {"triton.runtime.interpreter": _patch_triton, "iris.mem.gluon._cpu": _patch_gluon}

    class _Finder(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path, target=None):
            if name not in patches:
                return None
            sys.meta_path.remove(self)
            try:
                spec = importlib.util.find_spec(name)
            finally:
                sys.meta_path.insert(0, self)
            if spec is None or spec.loader is None:
                return spec
            exec_module = spec.loader.exec_module

            def patched(module):
                exec_module(module)
                patches[name](module)

            spec.loader.exec_module = patched
            return spec

    sys.meta_path.insert(0, _Finder())


class _Log:
    """This process's distinct launch keys, appended to ``IRIS_SPEC_LOG/<pid>.tsv`` as they appear."""

    def __init__(self):
        import threading

        self.seen: set = set()
        self.lock = threading.Lock()

    def add(self, kernel: str, key: str) -> None:
        with self.lock:
            if (kernel, key) in self.seen:
                return
            self.seen.add((kernel, key))
        with open(os.path.join(_LOG, f"{os.getpid()}.tsv"), "a") as f:
            f.write(f"{kernel}\t{key}\t{_caller()}\n")


def _caller() -> str:
    import sys

    frame = sys._getframe(2)
    while frame is not None:
        name = frame.f_code.co_filename
        if f"{os.sep}tests{os.sep}" in name:
            return f"{os.path.basename(name)}:{frame.f_code.co_name}"
        frame = frame.f_back
    return "?"


#: Annotations that fix an int parameter's type (Triton's names).
_INT_TYPES = ("i8", "i16", "i32", "i64", "u8", "u16", "u32", "u64")


def _typed(params) -> dict:
    """The int parameters among ``params`` (``inspect.Parameter``s or Triton's) annotated with their type."""
    out = {}
    for p in params:
        a = getattr(p, "annotation", None)
        if not isinstance(a, str):  # a dtype object (tl.int64) has its name
            a = getattr(a, "name", None)
            a = a if isinstance(a, str) else ""
        a = a.removeprefix("tl.").replace("uint", "u").replace("int", "i")  # tl.uint32 -> u32, int64 -> i64
        if a in _INT_TYPES:
            out[p.name] = a
    return out


def _key(names, constexprs, skip, args, kwargs, typed=None) -> str:
    """Triton's specialization of a launch, as text (see the module's docstring)."""
    bound = dict(zip(names, args))
    bound.update({k: v for k, v in kwargs.items() if k in names})
    parts = []
    for i, name in enumerate(names):
        if name not in bound:
            continue
        v = bound[name]
        if name in constexprs:
            parts.append(f"{name}={v!r}")
        elif hasattr(v, "data_ptr") and hasattr(v, "dtype"):
            parts.append(f"{name}:{v.dtype}:{'a16' if v.data_ptr() % 16 == 0 else 'u'}")
        elif isinstance(v, bool):
            parts.append(f"{name}:i1")
        elif isinstance(v, int):
            wide = (typed or {}).get(name) or ("i32" if -(2**31) <= v < 2**31 else "i64")
            spec = "" if (name in skip or i in skip) else ":one" if v == 1 else ":d16" if v % 16 == 0 else ":"
            parts.append(f"{name}:{wide}{spec}")
        elif isinstance(v, float):
            parts.append(f"{name}:fp32")
        else:
            parts.append(f"{name}:{'None' if v is None else type(v).__name__}")
    options = sorted((k, repr(v)) for k, v in kwargs.items() if k not in bound)
    return ";".join(parts) + "|" + ";".join(f"{k}={v}" for k, v in options)


def _guarded(log: _Log, kernel: str, make_key) -> None:
    try:
        log.add(kernel, make_key())
    except Exception as e:  # the count must never change what runs
        log.add("?", f"{type(e).__name__}: {e}")


def _patch_triton(interpreter) -> None:
    import inspect

    cls, run, log = interpreter.InterpretedFunction, interpreter.InterpretedFunction.run, _Log()

    def counted(self, *args, grid, warmup, **kwargs):
        if not warmup:
            params = inspect.signature(self.fn).parameters.values()
            names = [p.name for p in params]
            constexprs = {p.name for p in params if "constexpr" in str(p.annotation)}
            skip = set(self.kwargs.get("do_not_specialize") or ())
            typed = _typed(params)
            _guarded(log, self.__name__, lambda: _key(names, constexprs, skip, args, kwargs, typed))
        return run(self, *args, grid=grid, warmup=warmup, **kwargs)

    cls.run = counted


def _patch_gluon(cpu) -> None:
    launch, log = cpu._launch, _Log()

    def counted(jit_fn, grid, args, kwargs):
        names = [p.name for p in jit_fn.params]
        constexprs = {p.name for p in jit_fn.params if p.is_constexpr}
        skip = {p.name for p in jit_fn.params if getattr(p, "do_not_specialize", False)}
        typed = _typed(jit_fn.params)
        _guarded(log, jit_fn.__name__, lambda: _key(names, constexprs, skip, args, kwargs, typed))
        return launch(jit_fn, grid, args, kwargs)

    cpu._launch = counted


if _LOG:
    os.makedirs(_LOG, exist_ok=True)
    _install()
