"""What the distributions under packages/ declare, read statically (no installs, no builds).

The one reader of the pyprojects for the noxfile and the tools beside this file, so that each
fact has one source: a distribution's version is its package's ``__version__`` (the file that
``[tool.hatch.version] path`` names, as hatchling reads it when it builds), its import name is its
src layout's package, and the siblings it needs are its ``[project]`` requirements on other
distributions here, followed transitively with the extras each requirement asks for.

    from pyprojects import read
    projects = read(ROOT)                     # canonical name -> Project
    projects["iris-ccl"].version              # '0.2.0'
    projects["iris-ccl"].module               # 'iris.ccl'
    needs(projects, "iris-ccl", {"gluon"})    # {'iris-heap', 'iris-mem-common', 'iris-mem-triton', 'iris-mem-gluon'}
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10: nox itself depends on tomli there
    import tomli as tomllib

__all__ = ["Project", "canonicalize_name", "needs", "read", "requirements", "version_of"]

#: hatchling's default pattern for ``[tool.hatch.version] path`` (a ``__version__ = "..."`` line).
_VERSION = re.compile(r"""^(?:__version__|VERSION)\s*=\s*(['"])v?(?P<version>.+?)\1""", re.M)


@dataclass(frozen=True)
class Project:
    """One distribution: its folder and ``[project]`` table, and what follows from them."""

    folder: Path
    table: dict
    hatch: dict

    @property
    def name(self) -> str:
        return self.table["name"]

    @property
    def version(self) -> str:
        return version_of(self)

    @property
    def version_file(self) -> Path:
        """The file that defines the version (``[tool.hatch.version] path``; the pyproject without one)."""
        path = self.hatch.get("version", {}).get("path")
        return self.folder / path if path else self.folder / "pyproject.toml"

    @property
    def module(self) -> str:
        """The import name: the shallowest package (a folder with ``__init__.py``) under ``src/``."""
        inits = sorted(self.folder.glob("src/**/__init__.py"), key=lambda p: (len(p.parts), p))
        if not inits:
            raise ValueError(f"{self.folder}: no package under src/ (no __init__.py)")
        return ".".join(inits[0].parent.relative_to(self.folder / "src").parts)


def canonicalize_name(name: str) -> str:
    """PEP 503's normalized name (as ``packaging.utils.canonicalize_name``; versions need no packaging)."""
    return re.sub(r"[-_.]+", "-", name).lower()


def read(root: Path) -> dict[str, Project]:
    """Every distribution under ``root/packages``, by canonical name."""
    projects = {}
    for pyproject in sorted(Path(root).glob("packages/*/pyproject.toml")):
        data = tomllib.loads(pyproject.read_text())
        project = Project(pyproject.parent, data["project"], data.get("tool", {}).get("hatch", {}))
        projects[canonicalize_name(project.name)] = project
    return projects


def version_of(project: Project) -> str:
    """The version, defined once: ``__version__`` in the file ``[tool.hatch.version] path`` names.

    A version written in ``[project]`` itself is refused: it would be a second place to update.
    """
    where = project.folder / "pyproject.toml"
    if "version" in project.table or "version" not in project.table.get("dynamic", []):
        raise ValueError(
            f'{where}: the version must be defined once, in the package: write dynamic = ["version"] in '
            '[project] and [tool.hatch.version] path = "src/iris/<package>/__init__.py" (its __version__)'
        )
    if not project.hatch.get("version", {}).get("path"):
        raise ValueError(f"{where}: dynamic version without [tool.hatch.version] path (the file with __version__)")
    found = _VERSION.search(project.version_file.read_text())
    if found is None:
        raise ValueError(f'{project.version_file}: no __version__ = "..." line (named by {where})')
    return found["version"]


def requirements(project: Project, extras=()) -> list:
    """The requirements (``packaging.requirements.Requirement``) of ``[project].dependencies`` and of
    each optional-dependency group in ``extras``."""
    from packaging.requirements import Requirement  # here: reading versions needs no packaging

    texts = list(project.table.get("dependencies", []))
    for extra in extras:
        texts += project.table.get("optional-dependencies", {}).get(extra, [])
    return [Requirement(t) for t in texts]


def needs(projects: dict[str, Project], name: str, extras=()) -> set[str]:
    """The sibling distributions that installing ``name[extras]`` brings, transitively (``name`` itself not)."""
    found: set[str] = set()
    todo = [(canonicalize_name(name), frozenset(extras))]
    seen = set()
    while todo:
        current, current_extras = todo.pop()
        if (current, current_extras) in seen:
            continue
        seen.add((current, current_extras))
        for req in requirements(projects[current], current_extras):
            sibling = canonicalize_name(req.name)
            if sibling in projects:
                found.add(projects[sibling].name)
                todo.append((sibling, frozenset(req.extras)))
    found.discard(projects[canonicalize_name(name)].name)
    return found
