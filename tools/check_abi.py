"""Every layer that reads the device context declares the layout it reads, and all agree with iris.heap.

Static (ast and text, no installs). iris.heap names the layout of ``heap.context`` in
``CONTEXT_ABI_VERSION``. A distribution whose sources read that layout themselves — pointer
arithmetic on ``context_ptr`` in a kernel, indexing ``heap.context`` on the host, the index helpers
of ``iris.heap.context`` — must declare ``CONTEXT_ABI_VERSION`` in its top-level package, export it
in ``__all__``, compare it with ``iris.heap.CONTEXT_ABI_VERSION`` at import, and name the same
version as iris.heap. Layers that only hand ``heap.context`` to ``Context.initialize`` of a mem
layer read nothing themselves and declare nothing. Exit status 1, one line per violation.

    python tools/check_abi.py [ROOT]
"""

from __future__ import annotations

import ast
import re
import sys
from pathlib import Path

NAME = "CONTEXT_ABI_VERSION"
HEAP = "iris-heap"
# These read the layout by construction (they are the device layers over the heap).
MUST_DECLARE = ("iris-mem-triton", "iris-mem-gluon")
READS_LAYOUT = [
    (re.compile(r"\bcontext_ptr\s*\+"), "pointer arithmetic on context_ptr"),
    (re.compile(r"\b(?:load|store)\(\s*context_ptr\b"), "a load/store of context_ptr"),
    (re.compile(r"\.context\s*\["), "indexing heap.context"),
    (re.compile(r"\bfrom\s+iris\.heap\s+import\s+context\b|\biris\.heap\.context\.\w+"), "iris.heap.context's layout"),
]


def declared_version(tree: ast.Module) -> int | None:
    """The int a module assigns to CONTEXT_ABI_VERSION at top level, if any."""
    for node in tree.body:
        targets = (
            node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(node, ast.AnnAssign) else []
        )
        if any(isinstance(t, ast.Name) and t.id == NAME for t in targets) and node.value is not None:
            value = node.value
            if isinstance(value, ast.Constant) and isinstance(value.value, int):
                return value.value
            return -1  # declared, but not as a literal: reported
    return None


def exports(tree: ast.Module) -> set[str]:
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "__all__" for t in node.targets):
            if isinstance(node.value, (ast.List, ast.Tuple)):
                return {e.value for e in node.value.elts if isinstance(e, ast.Constant)}
    return set()


def checks_at_import(tree: ast.Module) -> bool:
    """A top-level ``if <heap>.CONTEXT_ABI_VERSION != CONTEXT_ABI_VERSION: raise ...``."""
    for node in tree.body:
        if not isinstance(node, ast.If) or not isinstance(node.test, ast.Compare):
            continue
        sides = [node.test.left, *node.test.comparators]
        has_heap = any(isinstance(s, ast.Attribute) and s.attr == NAME for s in sides)
        has_own = any(isinstance(s, ast.Name) and s.id == NAME for s in sides)
        raises = any(isinstance(n, ast.Raise) for n in ast.walk(node))
        if has_heap and has_own and raises:
            return True
    return False


def read_package(folder: Path) -> tuple[str, Path, list[Path]]:
    """(distribution name, top-level package __init__.py, every source file) of packages/<dist>."""
    dist = folder.name
    sources = sorted(p for p in (folder / "src").rglob("*.py") if "__pycache__" not in p.parts)
    inits = sorted((p for p in sources if p.name == "__init__.py"), key=lambda p: len(p.parts))
    if not inits:
        raise SystemExit(f"check-abi: {folder} has no package under src/")
    return dist, inits[0], sources


def layout_reads(sources: list[Path], root: Path) -> list[str]:
    """'file:line (what)' for every place in the sources that reads the context layout itself."""
    reads = []
    for src in sources:
        text = src.read_text()
        for pattern, why in READS_LAYOUT:
            for m in pattern.finditer(text):
                reads.append(f"{src.relative_to(root)}:{text.count(chr(10), 0, m.start()) + 1} ({why})")
    return reads


def violations(root: Path) -> tuple[int | None, list[str], list[str]]:
    packages = [read_package(f) for f in sorted(root.glob("packages/*")) if (f / "pyproject.toml").exists()]
    by_dist = {dist: (init, sources) for dist, init, sources in packages}
    found, agreeing = [], []
    if HEAP not in by_dist:
        return None, [f"check-abi: packages/{HEAP} not found under {root}"], agreeing
    heap_versions = {p: v for p in by_dist[HEAP][1] if (v := declared_version(ast.parse(p.read_text()))) is not None}
    if len(heap_versions) != 1 or -1 in heap_versions.values():
        return (
            None,
            [f"check-abi: iris-heap must assign {NAME} an int literal in exactly one module, found {heap_versions}"],
            agreeing,
        )
    ((heap_file, heap_version),) = heap_versions.items()
    for dist, (init, sources) in by_dist.items():
        if dist == HEAP:
            continue
        rel = init.relative_to(root)
        tree = ast.parse(init.read_text())
        version = declared_version(tree)
        reads = layout_reads(sources, root)
        if version is None:
            elsewhere = [s for s in sources if s != init and declared_version(ast.parse(s.read_text())) is not None]
            if elsewhere:
                found.append(
                    f"{rel}: {NAME} is declared in {elsewhere[0].relative_to(root)}; declare it in the package itself"
                )
            elif dist in MUST_DECLARE or reads:
                because = "it is a device layer over the heap" if not reads else f"it reads the layout: {reads[0]}"
                found.append(
                    f"{rel}: declares no {NAME}, but {because}; declare `{NAME} = {heap_version}` and check it against iris.heap at import"
                )
            continue
        if version != heap_version:
            found.append(
                f"{rel}: {NAME} = {version if version != -1 else '(not an int literal)'}, but iris-heap's is {heap_version} ({heap_file.relative_to(root)})"
            )
        if NAME not in exports(tree):
            found.append(f"{rel}: {NAME} is not in __all__")
        if not checks_at_import(tree):
            found.append(
                f"{rel}: {NAME} is declared but not compared with iris.heap.{NAME} at import (`if _heap.{NAME} != {NAME}: raise ImportError(...)`)"
            )
        agreeing.append(dist)
    return heap_version, found, agreeing


def main(argv: list[str]) -> int:
    root = Path(argv[1] if len(argv) > 1 else Path(__file__).resolve().parent.parent)
    heap_version, found, agreeing = violations(root)
    for line in found:
        print(line, file=sys.stderr)
    if found:
        return 1
    print(
        f"check-abi: iris-heap's device context ABI is {heap_version}; declared and checked at import by {', '.join(agreeing)}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
