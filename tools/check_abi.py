"""Every layer reads the device context by iris.heap.context's names, and declares the layout it reads.

Static (ast, no installs). ``iris.heap.context`` owns the layout of ``heap.context``: every index,
the error codes, the memory-model defaults and ``CONTEXT_ABI_VERSION``. This checks, over the
sources of every distribution under ``packages/``:

- **Names, not numbers.** Every offset added to a context pointer (``context_ptr + ...`` in device
  code) and every index into ``heap.context`` on the host is built from names of
  ``iris.heap.context`` (directly, ``abi.BASES_INDEX``, or through a module-level alias such as
  ``_BASES = tl.constexpr(_abi.BASES_INDEX)``) and runtime values (``world_size`` loaded from the
  context, a call); an integer literal or a module constant of the layer's own is a violation, and
  so is a bare ``load(context_ptr)`` (entry 0 without its name).
- **Names that exist.** Every ``<context module>.NAME`` a layer reads is defined by iris.heap.context.
- **Versions.** A distribution that reads the layout (it imports ``iris.heap.context`` or does
  arithmetic on a context pointer), and each mem layer in any case, declares
  ``CONTEXT_ABI_VERSION`` as an int literal in its top-level package, exports it in ``__all__``,
  checks it at import (``iris.heap.context.check_version(..., CONTEXT_ABI_VERSION)``, or a
  comparison with ``iris.heap.CONTEXT_ABI_VERSION`` that raises) and names iris.heap's version.

Exit status 1, one line per violation (``file:line: what``).

    python tools/check_abi.py [ROOT]
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

NAME = "CONTEXT_ABI_VERSION"
HEAP = "iris-heap"
HEAP_CONTEXT = "iris.heap.context"
# These read the layout by construction (they are the device layers over the heap).
MUST_DECLARE = ("iris-mem-triton", "iris-mem-gluon")
POINTERS = ("context_ptr",)  # what device code calls a pointer to the context


def declared_version(tree: ast.Module) -> int | None:
    """The int a module assigns to CONTEXT_ABI_VERSION at top level, if any (-1: not a literal)."""
    for node in tree.body:
        targets = (
            node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(node, ast.AnnAssign) else []
        )
        if any(isinstance(t, ast.Name) and t.id == NAME for t in targets) and node.value is not None:
            value = node.value
            if isinstance(value, ast.Constant) and isinstance(value.value, int):
                return value.value
            return -1
    return None


def exports(tree: ast.Module) -> set[str]:
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "__all__" for t in node.targets):
            if isinstance(node.value, (ast.List, ast.Tuple)):
                return {e.value for e in node.value.elts if isinstance(e, ast.Constant)}
    return set()


def checks_at_import(tree: ast.Module) -> bool:
    """A top-level ``check_version(..., CONTEXT_ABI_VERSION)`` call, or ``if <heap>.CONTEXT_ABI_VERSION
    != CONTEXT_ABI_VERSION: raise ...``."""
    for node in tree.body:
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Call):
            call = node.value
            func = call.func.attr if isinstance(call.func, ast.Attribute) else getattr(call.func, "id", "")
            if func == "check_version" and any(isinstance(a, ast.Name) and a.id == NAME for a in call.args):
                return True
        if isinstance(node, ast.If) and isinstance(node.test, ast.Compare):
            sides = [node.test.left, *node.test.comparators]
            has_heap = any(isinstance(s, ast.Attribute) and s.attr == NAME for s in sides)
            has_own = any(isinstance(s, ast.Name) and s.id == NAME for s in sides)
            if has_heap and has_own and any(isinstance(n, ast.Raise) for n in ast.walk(node)):
                return True
    return False


def abi_names(heap_context: Path) -> set[str]:
    """Every top-level name iris.heap.context defines (constants and functions)."""
    names = set()
    for node in ast.parse(heap_context.read_text()).body:
        if isinstance(node, ast.Assign):
            names.update(t.id for t in node.targets if isinstance(t, ast.Name))
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names.add(node.target.id)
        elif isinstance(node, ast.FunctionDef):
            names.add(node.name)
    return names


class Source:
    """One module: how it refers to iris.heap.context, and its module-level aliases of its names."""

    def __init__(self, path: Path, root: Path):
        self.path, self.rel = path, path.relative_to(root)
        self.tree = ast.parse(path.read_text())
        self.modules: set[str] = set()  # local names bound to iris.heap.context
        for node in ast.walk(self.tree):
            if isinstance(node, ast.ImportFrom) and (
                node.module == "iris.heap" or (node.level == 1 and node.module is None and path.parent.name == "heap")
            ):  # iris.heap's own modules import it relatively
                self.modules.update(a.asname or a.name for a in node.names if a.name == "context")
            elif isinstance(node, ast.Import):
                self.modules.update(a.asname for a in node.names if a.name == HEAP_CONTEXT and a.asname)
        self.aliases: dict[str, str] = {}  # module-level NAME -> the iris.heap.context name it stands for
        self.constants: set[str] = set()  # module-level names bound to anything else
        for node in self.tree.body:
            if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
                target, value = node.targets[0].id, node.value
                if isinstance(value, ast.Call) and len(value.args) == 1 and not value.keywords:
                    value = value.args[0]  # tl.constexpr(abi.X) / gl.constexpr(abi.X)
                named = self.context_name(value)
                if named is not None:
                    self.aliases[target] = named
                else:
                    self.constants.add(target)

    def context_name(self, node) -> str | None:
        """``X`` for ``<context module>.X``; None for anything else."""
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in self.modules:
            return node.attr
        return None

    @property
    def reads_layout(self) -> bool:
        """It imports iris.heap.context, or adds to / loads from a context pointer itself (handing
        the pointer to ``Context.initialize`` reads nothing)."""
        for n in ast.walk(self.tree):
            if isinstance(n, ast.BinOp) and isinstance(n.op, (ast.Add, ast.Sub)) and any(map(_is_pointer, _terms(n))):
                return True
            if isinstance(n, ast.Call) and n.args and _is_pointer(n.args[0]) and _callee(n) in _ACCESSES:
                return True
        return bool(self.modules)


_ACCESSES = ("load", "store", "atomic_add", "atomic_cas", "atomic_xchg")


def _callee(call: ast.Call) -> str:
    return call.func.attr if isinstance(call.func, ast.Attribute) else getattr(call.func, "id", "")


def _is_pointer(node) -> bool:
    return (isinstance(node, ast.Name) and node.id in POINTERS) or (
        isinstance(node, ast.Attribute) and node.attr in POINTERS
    )


def _terms(node) -> list:
    """The operands of a chain of ``+``/``-``."""
    if isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Add, ast.Sub)):
        return _terms(node.left) + _terms(node.right)
    return [node]


def name_violations(src: Source, package: list[Source], names: set[str]) -> list[str]:
    """Literal offsets, offsets by names that are not the context's, and names it does not define."""
    found = []
    aliases = {a for s in package for a in s.aliases}  # ops._BASES used from context.py, and so on
    own_constants = {c for s in package for c in s.constants} - aliases - names

    def where(node) -> str:
        return f"{src.rel}:{node.lineno}"

    def check_offset(term, what: str) -> None:
        if isinstance(term, ast.Constant) and isinstance(term.value, int):
            found.append(f"{where(term)}: {what} by the literal {term.value}; use iris.heap.context's name for it")
        elif isinstance(term, (ast.Name, ast.Attribute)):
            name = term.id if isinstance(term, ast.Name) else term.attr
            if src.context_name(term) is not None or name in aliases:
                return
            if name in own_constants:
                found.append(f"{where(term)}: {what} by {name}, a constant of the layer, not a name of {HEAP_CONTEXT}")

    for node in ast.walk(src.tree):
        named = src.context_name(node)
        if named is not None and named not in names:
            found.append(f"{where(node)}: {HEAP_CONTEXT} defines no {named}")
        if isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Add, ast.Sub)):
            terms = _terms(node)
            if any(_is_pointer(t) for t in terms) and not _is_pointer_chain_part(node, src):
                for t in terms:
                    if not _is_pointer(t):
                        check_offset(t, "an offset into the context")
        if isinstance(node, ast.Call) and node.args and _is_pointer(node.args[0]) and _callee(node) in _ACCESSES:
            found.append(
                f"{where(node)}: {_callee(node)}() of the context pointer itself (entry 0, unnamed); add its index name"
            )
        if isinstance(node, ast.Subscript) and isinstance(node.value, ast.Attribute) and node.value.attr == "context":
            index = node.slice
            parts = [index.lower, index.upper] if isinstance(index, ast.Slice) else [index]
            for part in parts:
                for t in _terms(part) if part is not None else []:
                    check_offset(t, "an index into heap.context")
    return found


def _is_pointer_chain_part(node, src: Source) -> bool:
    """Whether ``node`` is the left part of a longer ``+`` chain (checked once, at the whole chain)."""
    parents = getattr(src, "_parents", None)
    if parents is None:
        parents = src._parents = {
            id(child): parent for parent in ast.walk(src.tree) for child in ast.iter_child_nodes(parent)
        }
    parent = parents.get(id(node))
    return isinstance(parent, ast.BinOp) and isinstance(parent.op, (ast.Add, ast.Sub)) and parent.left is node


def read_package(folder: Path, root: Path) -> tuple[str, Path, list[Source]]:
    """(distribution name, top-level package __init__.py, every source) of packages/<dist>."""
    paths = sorted(p for p in (folder / "src").rglob("*.py") if "__pycache__" not in p.parts)
    inits = sorted((p for p in paths if p.name == "__init__.py"), key=lambda p: len(p.parts))
    if not inits:
        raise SystemExit(f"check-abi: {folder} has no package under src/")
    return folder.name, inits[0], [Source(p, root) for p in paths]


def violations(root: Path) -> tuple[int | None, list[str], list[str]]:
    packages = {}
    for folder in sorted(root.glob("packages/*")):
        if (folder / "pyproject.toml").exists() and (folder / "src").is_dir():
            dist, init, sources = read_package(folder, root)
            packages[dist] = (init, sources)
    if HEAP not in packages:
        return None, [f"check-abi: packages/{HEAP} not found under {root}"], []
    heap_init, heap_sources = packages[HEAP]
    versions = {s.rel: v for s in heap_sources if (v := declared_version(s.tree)) is not None}
    contexts = [s.path for s in heap_sources if s.path.name == "context.py" and s.path.parent.name == "heap"]
    if len(versions) != 1 or -1 in versions.values() or len(contexts) != 1:
        return (
            None,
            [f"check-abi: iris-heap must assign {NAME} an int literal in iris/heap/context.py only, found {versions}"],
            [],
        )
    ((heap_file, heap_version),) = versions.items()
    names = abi_names(contexts[0])
    found, agreeing = [], []
    for dist, (init, sources) in packages.items():
        for src in sources:
            if dist != HEAP or src.path != contexts[0]:
                found += name_violations(src, sources, names)
        if dist == HEAP:
            continue
        rel = init.relative_to(root)
        top = next(s for s in sources if s.path == init)
        version = declared_version(top.tree)
        readers = [s for s in sources if s.reads_layout]
        if version is None:
            elsewhere = [s for s in sources if s is not top and declared_version(s.tree) is not None]
            if elsewhere:
                found.append(f"{rel}: {NAME} is declared in {elsewhere[0].rel}; declare it in the package itself")
            elif dist in MUST_DECLARE or readers:
                because = "it is a device layer over the heap" if not readers else f"{readers[0].rel} reads the layout"
                found.append(
                    f"{rel}: declares no {NAME}, but {because}; declare `{NAME} = {heap_version}` and call "
                    f"iris.heap.context.check_version at import"
                )
            continue
        if version != heap_version:
            shown = version if version != -1 else "(not an int literal)"
            found.append(f"{rel}: {NAME} = {shown}, but iris-heap's is {heap_version} ({heap_file})")
        if NAME not in exports(top.tree):
            found.append(f"{rel}: {NAME} is not in __all__")
        if not checks_at_import(top.tree):
            found.append(f"{rel}: {NAME} is declared but not checked at import (iris.heap.context.check_version)")
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
        f"check-abi: iris-heap's device context ABI is {heap_version}; every layer reads it by name; "
        f"declared and checked at import by {', '.join(agreeing)}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
