"""Every requirement on a sibling distribution admits the sibling's version in this checkout.

Reads packages/*/pyproject.toml (no installs: tomllib and packaging only, through pyprojects.py
beside this file). For every requirement in ``dependencies`` and ``optional-dependencies`` that
names a sibling, the sibling's current version (its package's ``__version__``, the one place it is
written) must satisfy it; it must be a bounded range, never a path or URL; and any extra it asks for
must be one the sibling declares. Exit status 1, with one line per violation, when any fails (a
version written anywhere but the package is one).

    python tools/check_ranges.py [ROOT]
"""

from __future__ import annotations

import sys
from pathlib import Path

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version
from pyprojects import Project, read, version_of

UPPER_BOUNDS = {"<", "<=", "==", "===", "~="}


def versions(projects: dict[str, Project]) -> tuple[dict[str, str], list[str]]:
    """Canonical distribution name -> its version, and why a distribution's version cannot be read."""
    found, problems = {}, []
    for name, project in projects.items():
        try:
            found[name] = version_of(project)
        except (OSError, ValueError) as e:
            problems.append(str(e))
    return found, problems


def requirements(project: dict):
    """(where, requirement text) for every declared requirement of a [project] table."""
    for text in project.get("dependencies", []):
        yield "dependencies", text
    for extra, texts in project.get("optional-dependencies", {}).items():
        for text in texts:
            yield f"optional-dependencies.{extra}", text


def violations(root: Path) -> list[str]:
    projects = read(root)
    versions_here, found = versions(projects)
    for project in projects.values():
        where_file = (project.folder / "pyproject.toml").relative_to(root)
        for where, text in requirements(project.table):
            try:
                req = Requirement(text)
            except InvalidRequirement as e:
                found.append(f"{where_file} [{where}]: cannot parse requirement {text!r}: {e}")
                continue
            sibling = projects.get(canonicalize_name(req.name))
            if sibling is None or canonicalize_name(req.name) not in versions_here:
                continue  # not a sibling, or one whose version is reported above
            version = Version(versions_here[canonicalize_name(req.name)])
            at = f"{sibling.name} {version} ({sibling.version_file.relative_to(root)})"
            here = f"{where_file} [{where}]: {text!r}"
            if req.url:
                found.append(f"{here} is a URL/path; a sibling is required by a version range")
            elif not req.specifier:
                found.append(f"{here} has no version range; write e.g. '{req.name}>=0.1,<0.2'")
            elif not req.specifier.contains(version, prereleases=True):
                found.append(f"{here} does not admit {at}; widen the range or fix the version")
            elif not any(spec.operator in UPPER_BOUNDS for spec in req.specifier):
                found.append(f"{here} has no upper bound; a sibling range is compatible, e.g. '<0.2'")
            missing = sorted(req.extras - set(sibling.table.get("optional-dependencies", {})))
            if missing:
                found.append(f"{here} asks for extras {missing} that {at} does not declare")
    return found


def main(argv: list[str]) -> int:
    root = Path(argv[1] if len(argv) > 1 else Path(__file__).resolve().parent.parent)
    projects = read(root)
    if not projects:
        print(f"check-ranges: no packages/*/pyproject.toml under {root}", file=sys.stderr)
        return 1
    found = violations(root)
    for line in found:
        print(line, file=sys.stderr)
    if found:
        return 1
    here, _ = versions(projects)
    names = ", ".join(f"{p.name} {here[name]}" for name, p in projects.items())
    print(f"check-ranges: every sibling requirement admits the checkout's versions ({names})")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
