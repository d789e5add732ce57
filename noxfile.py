"""Test sessions: one per layer, each in a fresh virtual environment holding only that layer
and what it declares (siblings installed from their folders here, never through a path in a
pyproject). Adding a layer is adding one entry to LAYERS.

    nox                      # every test session
    nox -s test-heap         # one layer
    nox -s demo              # the README demo
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass, field
from pathlib import Path

import nox

ROOT = Path(__file__).parent
CPU_CONSTRAINTS = ROOT / "constraints-cpu.txt"
TRITON_OLDEST, TRITON_NEWEST = "3.6.0", "3.9.0"

nox.options.default_venv_backend = "virtualenv"
nox.options.reuse_existing_virtualenvs = False
nox.options.error_on_missing_interpreters = True


@dataclass(frozen=True)
class Layer:
    dist: str  # the distribution under test
    siblings: tuple[str, ...] = ()  # sibling distributions it needs, installed from their folders
    extras: str = ""  # extras of `dist` to install
    tritons: tuple[str, ...] = ()  # triton releases to test at (empty: triton is not a dependency)
    backends: tuple[str, ...] = ()  # values of IRIS_TEST_BACKEND (empty: no backend axis)
    env: dict = field(default_factory=dict)


LAYERS = {
    "heap": Layer("iris-heap"),
    "triton": Layer("iris-mem-triton", siblings=("iris-heap",), tritons=(TRITON_OLDEST, TRITON_NEWEST)),
    "gluon": Layer("iris-mem-gluon", siblings=("iris-heap",), tritons=(TRITON_OLDEST, TRITON_NEWEST)),
    "ccl": Layer(
        "iris-ccl",
        siblings=("iris-heap", "iris-mem-triton", "iris-mem-gluon"),
        extras="gluon",
        tritons=(TRITON_NEWEST,),
        backends=("triton", "gluon"),
    ),
}


def _install(session: nox.Session, layer: Layer, triton: str | None) -> None:
    pkgs = [str(ROOT / "packages" / d) for d in layer.siblings]
    target = str(ROOT / "packages" / layer.dist)
    pkgs.append(f"{target}[test{',' + layer.extras if layer.extras else ''}]")
    pins = [f"triton=={triton}"] if triton else []
    constraints = [] if _has_gpu() else ["-c", str(CPU_CONSTRAINTS)]
    session.install(*constraints, *pins, *pkgs)


def _has_gpu() -> bool:
    return shutil.which("nvidia-smi") is not None


def _pytest(session: nox.Session, layer: Layer, env: dict) -> None:
    tests = ROOT / "packages" / layer.dist / "tests"
    # pytest exits 5 when it collects nothing: nox treats that as the failure it is.
    session.run("pytest", str(tests), *session.posargs, env={**layer.env, **env})


def _define(name: str, layer: Layer) -> None:
    def session_fn(session: nox.Session, **params) -> None:
        triton = params.get("triton")
        _install(session, layer, triton)
        env = {"IRIS_TEST_BACKEND": params["backend"]} if "backend" in params else {}
        _pytest(session, layer, env)

    fn = session_fn
    if layer.backends:
        fn = nox.parametrize("backend", list(layer.backends))(fn)
    if layer.tritons:
        fn = nox.parametrize("triton", list(layer.tritons))(fn)
    fn.__name__ = f"test_{name}"
    nox.session(name=f"test-{name}")(fn)


for _name, _layer in LAYERS.items():
    _define(_name, _layer)


@nox.session(default=False)
def demo(session: nox.Session) -> None:
    """The README demo: a symmetric heap over 4 CPU ranks (GPU ranks when a GPU is present)."""
    constraints = [] if _has_gpu() else ["-c", str(CPU_CONSTRAINTS)]
    session.install(*constraints, str(ROOT / "packages" / "iris-heap"))
    session.run("python", str(ROOT / "packages" / "iris-heap" / "examples" / "heap_demo.py"), *session.posargs)


_INSTALL_GLUON_CHECK = """
import importlib.metadata as md, importlib.util, sys
import iris.heap, iris.mem.gluon
assert iris.mem.gluon.__version__ == "0.1.0", iris.mem.gluon.__version__
for module in ("iris.heap", "iris.mem.gluon"):
    where = importlib.util.find_spec(module).origin
    assert where.startswith(sys.prefix), f"{module} imported from {where}, not from the installed wheel"
for module in ("iris.mem.triton", "iris.ccl"):
    assert importlib.util.find_spec(module) is None, f"{module} is importable but was not installed"
iris_dists = sorted(d.metadata["Name"] for d in md.distributions() if d.metadata["Name"].startswith("iris-"))
assert iris_dists == ["iris-heap", "iris-mem-gluon"], iris_dists
print("installed alone:", iris_dists)
"""


@nox.session(name="install-gluon")
def install_gluon(session: nox.Session) -> None:
    """The wheels of iris-heap and iris-mem-gluon, installed alone, give iris.heap and iris.mem.gluon
    (whose Gluon kernels then run) and no iris.mem.triton or iris.ccl."""
    wheels = Path(session.create_tmp()) / "wheels"
    shutil.rmtree(wheels, ignore_errors=True)
    for dist in ("iris-heap", "iris-mem-gluon"):
        folder = str(ROOT / "packages" / dist)
        session.run("python", "-m", "pip", "wheel", "--no-deps", "--wheel-dir", str(wheels), folder)
    constraints = [] if _has_gpu() else ["-c", str(CPU_CONSTRAINTS)]
    session.install(*constraints, f"triton=={TRITON_NEWEST}", *sorted(str(w) for w in wheels.glob("*.whl")))
    session.chdir(session.create_tmp())  # nothing of the checkout on sys.path
    session.run("python", "-c", _INSTALL_GLUON_CHECK)
    kernel = ROOT / "packages" / "iris-mem-gluon" / "tests" / "_gluon_plain_kernel.py"
    session.run("python", str(kernel), env={} if _has_gpu() else {"TRITON_INTERPRET": "1"})
