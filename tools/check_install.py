"""Run inside an environment that installed one Iris distribution from wheels: it holds exactly what
that distribution declares, taken from those wheels, and nothing of the checkout.

    python check_install.py WHEEL_DIR SPEC
    SPEC (JSON): {"expect": {dist: [module, version], ...}, "absent": {dist: module, ...}, "checkout": path}

Checks that every expected module imports from this environment's site-packages (not from the
checkout's packages/), carries its package's version (``__version__``, the one place it is written,
which the checkout's copy and the installed metadata must both show), and agrees with iris.heap's
device context ABI when it declares one; that every absent module cannot be found; that importlib.metadata
lists exactly the expected iris-* distributions; and that each installed distribution's files are
byte for byte those of its wheel in WHEEL_DIR (hashed against the wheel's RECORD). Run it from a
directory outside the checkout, so that nothing of the checkout is on sys.path.
"""

from __future__ import annotations

import base64
import csv
import hashlib
import importlib
import importlib.metadata as md
import importlib.util
import io
import json
import re
import sys
import sysconfig
import zipfile
from pathlib import Path


def canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def find(module: str):
    try:
        return importlib.util.find_spec(module)
    except ModuleNotFoundError:  # a parent package (e.g. iris.mem) is not installed at all
        return None


def wheel_record(wheels: Path, dist: md.Distribution) -> set[tuple[str, str]]:
    """(path, hash) of every file the distribution's wheel in `wheels` installs (its .dist-info aside)."""
    stem = f"{dist.metadata['Name'].replace('-', '_')}-{dist.version}-"
    matches = sorted(w for w in wheels.glob("*.whl") if w.name.lower().startswith(stem.lower()))
    if len(matches) != 1:
        raise SystemExit(f"expected one wheel {stem}*.whl in {wheels}, found {[w.name for w in matches]}")
    with zipfile.ZipFile(matches[0]) as whl:
        record = next(n for n in whl.namelist() if n.endswith(".dist-info/RECORD"))
        rows = csv.reader(io.TextIOWrapper(whl.open(record), encoding="utf-8"))
        return {(path, digest) for path, digest, *_ in rows if digest and ".dist-info/" not in path}


def file_digest(path: Path) -> str:
    """A file's hash as a wheel's RECORD writes it."""
    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(path.read_bytes()).digest()).rstrip(b"=").decode()


def differing_files(wheels: Path, dist: md.Distribution) -> list[str]:
    """Files of the distribution's wheel whose installed copy is missing or has other bytes."""
    differ = []
    for path, digest in sorted(wheel_record(wheels, dist)):
        installed = Path(dist.locate_file(path))
        if not installed.is_file() or file_digest(installed) != digest:
            differ.append(path)
    return differ


def main(wheels: Path, spec: dict) -> list[str]:
    failures = []
    purelib = Path(sysconfig.get_paths()["purelib"]).resolve()
    checkout_packages = (Path(spec["checkout"]) / "packages").resolve()
    modules = {}
    for dist, (module, version) in spec["expect"].items():
        try:
            modules[module] = importlib.import_module(module)
        except Exception as e:  # reported with the module that was asked for
            failures.append(f"{dist}: `import {module}` failed: {type(e).__name__}: {e}")
            continue
        origin = Path(modules[module].__file__).resolve()
        if checkout_packages in origin.parents or purelib not in origin.parents:
            failures.append(f"{dist}: {module} imported from {origin}, not from this environment's {purelib}")
        found = getattr(modules[module], "__version__", None)
        if found != version:
            failures.append(f"{dist}: {module}.__version__ is {found!r}, the checkout's is {version!r}")
        try:
            declared = md.version(dist)
        except md.PackageNotFoundError:
            declared = None
        if declared != found:
            failures.append(f"{dist}: installed metadata says version {declared!r}, {module}.__version__ {found!r}")
    heap = modules.get("iris.heap")
    for module, mod in modules.items():
        abi = getattr(mod, "CONTEXT_ABI_VERSION", None)
        if heap is not None and abi is not None and abi != heap.CONTEXT_ABI_VERSION:
            failures.append(f"{module} reads context ABI {abi}, iris.heap provides {heap.CONTEXT_ABI_VERSION}")
    for dist, module in spec["absent"].items():
        where = find(module)
        if where is not None:
            failures.append(
                f"{module} ({dist}) is importable from {where.origin or where.submodule_search_locations} but was not to be installed"
            )
    dists = {canonical(d.metadata["Name"]): d for d in md.distributions()}
    iris = sorted(name for name in dists if name.startswith("iris-"))
    if iris != sorted(spec["expect"]):
        failures.append(f"installed iris distributions are {iris}, expected exactly {sorted(spec['expect'])}")
    for name in iris:
        differ = differing_files(wheels, dists[name])
        if differ:
            failures.append(f"{name}: {len(differ)} installed files differ from its wheel in {wheels}: {differ[:3]}")
    return failures


if __name__ == "__main__":
    wheel_dir, spec = Path(sys.argv[1]), json.loads(sys.argv[2])
    problems = main(wheel_dir, spec)
    for line in problems:
        print(line, file=sys.stderr)
    if problems:
        sys.exit(1)
    print(f"installed alone from {wheel_dir}: {', '.join(f'{d} {v}' for d, (_, v) in sorted(spec['expect'].items()))}")
