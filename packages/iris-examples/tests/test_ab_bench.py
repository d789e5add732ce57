"""tools/ab-bench.py, the A/B of a benchmark between a revision and the working tree: its pieces
that need no benchmark run (the old side's source, the search path, the comparison)."""

import importlib.util
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
TOOL = ROOT / "tools" / "ab-bench.py"


@pytest.fixture(scope="module")
def ab():
    spec = importlib.util.spec_from_file_location("ab_bench", TOOL)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _csv(path: Path, rows: list[tuple]) -> Path:
    lines = ["collective,bytes_per_rank,time_us,device"] + [f"{c},{b},{t},GPU X" for c, b, t in rows]
    path.write_text("\n".join(lines) + "\n")
    return path


def test_the_comparison_is_per_row_the_median_of_each_sides_runs(ab, tmp_path, capsys):
    old = [_csv(tmp_path / f"old-{i}.csv", [("all_gather", 1024, t), ("broadcast", 2048, 10.0)]) for i, t in
           enumerate((20.0, 22.0, 30.0))]  # fmt: skip
    new = [_csv(tmp_path / f"new-{i}.csv", [("all_gather", 1024, t), ("broadcast", 2048, 5.0)]) for i, t in
           enumerate((11.0, 11.0, 40.0))]  # fmt: skip
    ab.report(old, new, "time_us")
    lines = [line for line in capsys.readouterr().out.splitlines() if "new/old" in line]
    assert len(lines) == 2
    gather, broadcast = lines
    assert gather.split()[:2] == ["all_gather", "1024"] and "GPU X" not in gather  # constant columns left out
    assert "old         22  new         11  new/old  0.500" in gather
    assert "new/old  0.500" in broadcast


@pytest.mark.skipif(not (ROOT / ".git").exists(), reason="needs the git checkout")
def test_the_old_side_is_the_packages_source_at_the_revision(ab, tmp_path):
    rev = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True, text=True, check=True)
    src = ab._source_at(rev.stdout.strip(), "iris-ccl", tmp_path)
    assert (src / "iris" / "ccl" / "__init__.py").is_file()
    path = ab._python_path("iris-ccl", src).split(":")
    assert str(src) in path and str(ROOT / "packages" / "iris-ccl" / "src") not in path
    assert str(ROOT / "packages" / "iris-heap" / "src") in path  # every other package from the tree
    with pytest.raises(SystemExit, match="no packages/iris-nothing/src"):
        ab._python_path("iris-nothing", None)
