"""Test sessions: one per layer, each in a fresh virtual environment holding only that layer
and what it declares (siblings installed from their folders here, never through a path in a
pyproject). Adding a layer is adding one entry to LAYERS; which siblings it needs, its import name
and its version come from its pyproject and package (tools/pyprojects.py), never from here.

Packaging is proven beside the tests: `wheels` builds every distribution's wheel into one folder,
`install(dist=...)` installs one distribution alone from it and checks that exactly it and what it
declares arrive, and `check-ranges` / `check-abi` read the pyprojects and sources statically.

    nox                              # every test and packaging session (what CI runs)
    nox -s test-heap                 # one layer
    nox -s "install(dist='iris-mem-gluon')"
    nox -s demo                      # the README demo
"""

from __future__ import annotations

import functools
import json
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import nox

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10: nox itself depends on tomli there
    import tomli as tomllib

ROOT = Path(__file__).parent
PACKAGES = ROOT / "packages"
TOOLS = ROOT / "tools"
sys.path.insert(0, str(TOOLS))  # the one reader of the pyprojects, shared with tools/check_ranges.py
import pyprojects  # noqa: E402

PROJECTS = pyprojects.read(ROOT)
CPU_CONSTRAINTS = ROOT / "constraints-cpu.txt"
TRITON_OLDEST, TRITON_NEWEST = "3.6.0", "3.9.0"
# What every layer's tests share (the pytest plugin, the mem conformance suite): installed from its
# folder into each test session beside the layer, and a dependency of no layer.
TEST_SUPPORT = "iris-testing"

# uv when it is installed (the README's commands install it beside nox): it makes each of the
# ~20 sessions' environments from its cache in about a second, where pip unpacks torch and triton
# again for every session (25-30 s each on CI's 2 cores). virtualenv and pip otherwise.
nox.options.default_venv_backend = "uv|virtualenv"
nox.options.reuse_existing_virtualenvs = False
nox.options.error_on_missing_interpreters = True


@dataclass(frozen=True)
class Layer:
    dist: str  # the distribution under test
    extras: str = ""  # extras of `dist` to install
    tritons: tuple[str, ...] = ()  # triton releases to test at (empty: triton is not a dependency)
    backends: tuple[str, ...] = ()  # values of IRIS_TEST_BACKEND (empty: no backend axis)
    env: dict = field(default_factory=dict)

    def siblings(self, extras: str) -> list[str]:
        """The siblings `dist[extras]` needs (its pyproject's, transitively), installed from their folders."""
        return sorted(pyprojects.needs(PROJECTS, self.dist, [e for e in extras.split(",") if e]))


LAYERS = {
    "heap": Layer("iris-heap"),
    "common": Layer("iris-mem-common", tritons=(TRITON_NEWEST,)),
    "triton": Layer("iris-mem-triton", tritons=(TRITON_OLDEST, TRITON_NEWEST)),
    "gluon": Layer("iris-mem-gluon", tritons=(TRITON_OLDEST, TRITON_NEWEST)),
    "ccl": Layer("iris-ccl", extras="gluon", tritons=(TRITON_NEWEST,), backends=("triton", "gluon")),
    "ops": Layer("iris-ops", extras="gluon", tritons=(TRITON_NEWEST,), backends=("triton", "gluon")),
    "examples": Layer("iris-examples", tritons=(TRITON_NEWEST,)),
}


def _install(session: nox.Session, layer: Layer, triton: str | None, extras: str = "test") -> None:
    extras = ",".join(e for e in (extras, layer.extras) if e)
    siblings = layer.siblings(extras)
    if "test" in extras.split(","):  # the test support, and the siblings it needs itself (iris-heap)
        siblings += [d for d in INSTALLS[TEST_SUPPORT] if d not in siblings and d != layer.dist]
    pkgs = [str(PACKAGES / d) for d in siblings]
    pkgs.append(f"{PACKAGES / layer.dist}[{extras}]" if extras else str(PACKAGES / layer.dist))
    pins = [f"triton=={triton}"] if triton else []
    _pip_install(session, *_cpu_constraints(), *pins, *pkgs)


def _pip_install(session: nox.Session, *args: str) -> None:
    # --no-compile: byte-compiling all of torch at install time doubles a pip install (12 s -> 23 s
    # on 2 cores); Python compiles the few modules a session imports on first use instead.
    if session.venv_backend == "uv":
        # uv reads no pip configuration: pip's wheel folders are passed on. And uv caches a wheel by
        # name and version, and a folder's build until its pyproject changes: this checkout's
        # distributions are refreshed, else an install took a stale 0.2.0 of a sibling from an
        # earlier run (the install sessions' file check caught it) and a test ran old code.
        refresh = (a for p in PROJECTS.values() for a in ("--refresh-package", p.name))
        args = (*(a for folder in _pip_find_links() for a in ("--find-links", folder)), *refresh, *args)
    session.install("--no-compile", *args)


@functools.cache
def _pip_find_links() -> tuple[str, ...]:
    """The wheel folders pip is configured to look in (``PIP_FIND_LINKS``, pip.conf's ``find-links``).

    The CPU build of torch that constraints-cpu.txt names lies in one of them on the CI machines;
    PyPI has only the CUDA build, so without them a uv install fails to resolve rather than
    download gigabytes."""
    listed = subprocess.run(
        [sys.executable, "-m", "pip", "config", "list"], capture_output=True, text=True, check=False
    ).stdout.splitlines()
    values = [line.split("=", 1)[1].strip("'\"") for line in listed if line.split("=", 1)[0].endswith(".find-links")]
    values.append(os.environ.get("PIP_FIND_LINKS", ""))
    return tuple(dict.fromkeys(folder for value in values for folder in value.split()))


def _discard_venv(session: nox.Session) -> None:
    """Delete the session's environment once it has run (IRIS_NOX_KEEP_VENVS=1 keeps them).

    Every environment holds its own torch and triton (about 1.5 GB); a bare `nox` makes 18 of them,
    more than a small CI disk holds. Sessions never reuse environments, so nothing is lost.
    """
    location = getattr(session.virtualenv, "location", None)
    if location and os.environ.get("IRIS_NOX_KEEP_VENVS") != "1":
        shutil.rmtree(location, ignore_errors=True)


def _discarding(fn):
    """Session body wrapper: run it, then delete its environment, whether it passed or failed."""

    @functools.wraps(fn)
    def wrapper(session: nox.Session, *args, **kwargs):
        try:
            return fn(session, *args, **kwargs)
        finally:
            _discard_venv(session)

    return wrapper


def _has_gpu() -> bool:
    return shutil.which("nvidia-smi") is not None


def _cpu_constraints() -> list[str]:
    return [] if _has_gpu() else ["-c", str(CPU_CONSTRAINTS)]


def _pytest(session: nox.Session, layer: Layer, env: dict) -> None:
    tests = PACKAGES / layer.dist / "tests"
    # pytest exits 5 when it collects nothing: nox treats that as the failure it is.
    # PYTHONDONTWRITEBYTECODE unset: packages are installed without byte-compiling them
    # (_pip_install), so the first import must write the .pyc files that every later rank process
    # reads; with it set, each spawned process compiled torch's Python again.
    session.run("pytest", str(tests), *session.posargs, env={**layer.env, **env, "PYTHONDONTWRITEBYTECODE": None})


def _define(name: str, layer: Layer) -> None:
    def session_fn(session: nox.Session, **params) -> None:
        triton = params.get("triton")
        _install(session, layer, triton)
        env = {"IRIS_TEST_BACKEND": params["backend"]} if "backend" in params else {}
        _pytest(session, layer, env)

    fn = _discarding(session_fn)
    if layer.backends:
        fn = nox.parametrize("backend", list(layer.backends))(fn)
    if layer.tritons:
        fn = nox.parametrize("triton", list(layer.tritons))(fn)
    fn.__name__ = f"test_{name}"
    nox.session(name=f"test-{name}")(fn)


for _name, _layer in LAYERS.items():
    _define(_name, _layer)


@nox.session(default=False)
@_discarding
def demo(session: nox.Session) -> None:
    """The README demo: message passing, then a GEMM fused with an all-scatter, on 4 ranks.

    CPU ranks under the interpreter without a GPU, GPU ranks with one: the examples' CLI decides.
    """
    # Without a GPU the newest tested triton; with one, the triton that the CUDA torch build pins.
    _install(session, LAYERS["examples"], None if _has_gpu() else TRITON_NEWEST, extras="")
    for example in ("message-passing", "gemm-all-scatter"):
        session.run("python", "-m", "iris.examples", example, "--ranks", "4", *session.posargs)


# --- packaging: wheels, each distribution installed alone, sibling ranges, the context ABI ---

# The import of each distribution (its src layout's package), and what installing one distribution
# (alone, or with an extra that brings siblings) must give: itself and the siblings its pyproject
# requires, transitively, nothing else. The install sessions check that the wheels give exactly that.
MODULES = {p.name: p.module for p in PROJECTS.values()}


def _installs() -> dict[str, tuple[str, ...]]:
    installs = {}
    for p in PROJECTS.values():
        alone = pyprojects.needs(PROJECTS, p.name)
        installs[p.name] = (*sorted(alone), p.name)
        for extra in p.table.get("optional-dependencies", {}):
            with_extra = pyprojects.needs(PROJECTS, p.name, [extra])
            if with_extra != alone:
                installs[f"{p.name}[{extra}]"] = (*sorted(with_extra), p.name)
    return dict(sorted(installs.items(), key=lambda kv: (len(kv[1]), kv[0])))  # the bottom layers first


INSTALLS = _installs()


def _pyproject(dist: str) -> dict:
    return tomllib.loads((PACKAGES / dist / "pyproject.toml").read_text())


def _wheel_dir(session: nox.Session) -> Path:
    return (session.cache_dir / "wheels").resolve()  # absolute: the checks run from a temp dir


@nox.session(venv_backend="virtualenv")  # pip wheel: a uv environment has no pip
@_discarding
def wheels(session: nox.Session) -> None:
    """Build the wheel of every distribution into one folder, the one the install sessions use."""
    dists = sorted(p.folder.name for p in PROJECTS.values())
    folder = _wheel_dir(session)
    shutil.rmtree(folder, ignore_errors=True)
    backends = sorted({req for d in dists for req in _pyproject(d)["build-system"]["requires"]})
    _pip_install(session, *backends)  # once here, instead of one isolated build environment per wheel
    folders = [str(PACKAGES / d) for d in dists]
    session.run(
        "python", "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--wheel-dir", str(folder), *folders
    )
    built = sorted(w.name for w in folder.glob("*.whl"))
    if len(built) != len(dists):
        session.error(f"built {built} for {dists}")


@nox.session(requires=["wheels"])
@nox.parametrize("dist", list(INSTALLS))
@_discarding
def install(session: nox.Session, dist: str) -> None:
    """One distribution, installed alone from the wheels, gives exactly its and its dependencies' modules.

    Siblings come from the same wheel folder, nothing from the checkout; versions are the pyprojects'.
    """
    wheels = _wheel_dir(session)
    name = dist.split("[")[0]
    versions = {p.name: p.version for p in PROJECTS.values()}  # each package's __version__
    # Constraints (they install nothing themselves): each sibling at its version here, so that pip
    # takes it from the wheel folder; without a GPU the newest tested triton (with one, torch's pin).
    pins = Path(session.create_tmp()) / "pins.txt"
    pins.write_text(
        "".join(f"{d}=={v}\n" for d, v in versions.items()) + ("" if _has_gpu() else f"triton=={TRITON_NEWEST}\n")
    )
    _pip_install(session, "--find-links", str(wheels), "-c", str(pins), *_cpu_constraints(), dist)
    expect = INSTALLS[dist]
    spec = {
        "expect": {d: [MODULES[d], versions[d]] for d in expect},
        "absent": {d: MODULES[d] for d in MODULES if d not in expect},
        "checkout": str(ROOT),
    }
    session.chdir(session.create_tmp())  # nothing of the checkout on sys.path
    session.run("python", str(TOOLS / "check_install.py"), str(wheels), json.dumps(spec))
    interpret = {} if _has_gpu() else {"TRITON_INTERPRET": "1"}
    if name == "iris-mem-gluon":  # a Gluon kernel that knows nothing of Iris still runs (on CPU too)
        session.run("python", str(PACKAGES / name / "tests" / "_gluon_plain_kernel.py"), env=interpret)
    if name == "iris-examples":  # the CLI, both ways it is installed
        session.run("python", "-m", "iris.examples", "--list")
        session.run("iris-examples", "--list")


@nox.session(name="check-ranges", venv_backend="none")
def check_ranges(session: nox.Session) -> None:
    """Every sibling requirement in every pyproject admits the sibling's version here (no installs)."""
    session.run(sys.executable, str(TOOLS / "check_ranges.py"), str(ROOT))


@nox.session(name="check-abi", venv_backend="none")
def check_abi(session: nox.Session) -> None:
    """Every layer that reads the device context declares and checks iris.heap's CONTEXT_ABI_VERSION."""
    session.run(sys.executable, str(TOOLS / "check_abi.py"), str(ROOT))
