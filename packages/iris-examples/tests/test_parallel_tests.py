"""tools/parallel-tests.py, the runner the GPU test runs use (BENCHMARKS.md): the files it writes
decide what a later run repeats, so a test it loses or misfiles goes unrun on the GPU."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

TOOL = Path(__file__).resolve().parents[3] / "tools" / "parallel-tests.py"
REFUSED = "CUDA-capable device(s) is/are busy or unavailable"

TESTS = f'''
import os, pytest

def test_pass():
    pass

def test_fail():
    assert False

@pytest.mark.parametrize("x", ["x y"])
def test_space(x):
    raise RuntimeError("{REFUSED}")

def test_crash():
    os._exit(3)

def test_after():
    pass
'''


def _run(cwd: Path, *args: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTEST_DISABLE_PLUGIN_AUTOLOAD="1")  # a bare pytest: no torch to import
    return subprocess.run([sys.executable, *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=300)


def test_a_crashed_job_s_rest_is_not_run_and_failures_are_listed_for_a_rerun(tmp_path):
    """Dealt 0, 1, 1, 0, 0: job 0 runs test_pass then dies in test_crash, so test_crash and
    test_after have no outcome (not-run.txt); job 1's two failures, one with a space in its id,
    go to failed.txt; the refusal message is counted. A later run with nothing to list removes both."""
    (tmp_path / "test_a.py").write_text(TESTS)
    done = _run(tmp_path, str(TOOL), "--jobs", "2", "--logs", "logs", "--", "test_a.py", "-p", "no:cacheprovider")
    assert done.returncode == 1, done.stdout + done.stderr
    logs = tmp_path / "logs"
    assert (logs / "not-run.txt").read_text() == "test_a.py::test_crash\ntest_a.py::test_after\n"
    assert (logs / "failed.txt").read_text() == "test_a.py::test_fail\ntest_a.py::test_space[x y]\n"
    assert "total: 1 failed, 2 not run, 1 passed, 1 refused of 5 tests" in done.stdout, done.stdout
    assert "2 tests not run; to run just those: pytest @logs/not-run.txt" in done.stdout
    assert "1 tests were refused a CUDA context" in done.stdout and "again in 1 jobs" in done.stdout, done.stdout
    assert "retry1-job 0 (1 tests, exit 1)" in done.stdout, done.stdout  # refused again: the last try
    if pytest.version_tuple >= (8, 2):  # @file arguments
        rerun = _run(tmp_path, "-m", "pytest", "-q", "-p", "no:cacheprovider", "@logs/failed.txt")
        assert "2 failed in" in rerun.stdout, rerun.stdout  # the ids as written select just those two

    again = _run(tmp_path, str(TOOL), "--jobs", "2", "--logs", "logs", "--", "test_a.py::test_pass",
                 "-p", "no:cacheprovider")  # fmt: skip
    assert again.returncode == 0, again.stdout + again.stderr
    assert sorted(os.listdir(logs)) == ["job-0.log"]
    assert "not run" not in again.stdout and "jobs logged" not in again.stdout


def test_a_selection_outside_this_directory_runs_and_is_listed_by_its_path(tmp_path):
    """The runner in one folder, the tests in a sibling (``../elsewhere/tests``): pytest names them
    from the selection's own root, which the jobs, run from here, would not find (every test was
    reported not run); the failed one is listed by its absolute path, which reruns from anywhere."""
    here, tests = tmp_path / "here", tmp_path / "elsewhere" / "tests"
    here.mkdir()
    tests.mkdir(parents=True)
    (tests / "test_r.py").write_text("def test_x():\n    pass\n\ndef test_y():\n    assert False\n")
    done = _run(here, str(TOOL), "--jobs", "2", "--logs", "logs", "--", str(tests), "-p", "no:cacheprovider")
    assert "total: 1 failed, 1 passed of 2 tests" in done.stdout, done.stdout + done.stderr
    assert (here / "logs" / "failed.txt").read_text() == f"{tests / 'test_r.py'}::test_y\n"
    assert not (here / "logs" / "not-run.txt").exists()


TIMED = """
import json, os, time, pytest

def _record(name, start):
    with open(os.path.join(os.path.dirname(__file__), "times.jsonl"), "a") as f:
        f.write(json.dumps([name, start, time.time()]) + "\\n")

@pytest.mark.parametrize("n", range(4))
def test_shared(n):
    start = time.time()
    time.sleep(0.3)
    _record(f"shared{n}", start)

@pytest.mark.alone
@pytest.mark.parametrize("n", range(2))
def test_kills(n):
    start = time.time()
    time.sleep(0.1)
    _record(f"alone{n}", start)
"""


RETRIED = f"""
import os, pytest

@pytest.mark.parametrize("n", range(4))
def test_refused_once(n):
    mark = f"tried-{{n}}"
    if n % 2 == 0 and not os.path.exists(mark):  # CUDA refused this process the first time
        open(mark, "w").close()
        raise RuntimeError("CUDA error: {REFUSED}")

def test_fails_alike_each_time():
    raise AssertionError("not a refusal")
"""


def test_refused_tests_run_again_with_half_the_jobs_and_their_last_run_counts(tmp_path):
    """A test that failed because CUDA refused its process (MPS's client limit) runs again in half as
    many jobs, and counts as its last run; a test that failed otherwise is not run again."""
    (tmp_path / "test_r.py").write_text(RETRIED)
    done = _run(tmp_path, str(TOOL), "--jobs", "4", "--logs", "logs", "--", "test_r.py", "-p", "no:cacheprovider")
    assert done.returncode == 1, done.stdout + done.stderr  # test_fails_alike_each_time
    assert "2 tests were refused a CUDA context" in done.stdout and "again in 2 jobs" in done.stdout, done.stdout
    assert "total: 1 failed, 4 passed of 5 tests (the last run of each; 1 retries" in done.stdout, done.stdout
    assert (tmp_path / "logs" / "failed.txt").read_text() == "test_r.py::test_fails_alike_each_time\n"
    retried = sorted(n for n in os.listdir(tmp_path / "logs") if n.startswith("retry1-") and n.endswith(".log"))
    assert retried == ["retry1-job-0.log", "retry1-job-1.log"], retried
    assert "test_fails_alike_each_time" not in "".join((tmp_path / "logs" / n).read_text() for n in retried)


def test_tests_marked_alone_run_after_every_parallel_job_in_one_job(tmp_path):
    """``alone`` tests (a process killed while its kernel runs, which under MPS faults every process
    on the GPU) start only once every other test has ended, one after the other in job-alone."""
    (tmp_path / "test_t.py").write_text(TIMED)
    (tmp_path / "pytest.ini").write_text("[pytest]\nmarkers =\n    alone: runs by itself\n")
    done = _run(tmp_path, str(TOOL), "--jobs", "2", "--logs", "logs", "--", "test_t.py", "-p", "no:cacheprovider")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "6 tests in 2 jobs, then 2 alone" in done.stdout and "total: 6 passed of 6 tests" in done.stdout, done.stdout
    assert sorted(os.listdir(tmp_path / "logs")) == ["job-0.log", "job-1.log", "job-alone.log"]
    lines = (tmp_path / "times.jsonl").read_text().splitlines()
    times = {name: (start, end) for name, start, end in map(json.loads, lines)}
    shared_end = max(end for name, (_, end) in times.items() if name.startswith("shared"))
    assert times["alone0"][0] >= shared_end and times["alone1"][0] >= times["alone0"][1], times


def test_gpu_tests_with_jobs_runs_each_named_folder_through_the_runner(tmp_path):
    """``JOBS=N tools/gpu-tests.sh FOLDER... -- ARGS``: each folder dealt over N jobs by
    parallel-tests, its logs in LOGS/<the folder's parent>, every job compiling through
    iris.testing.compile_once; without a folder, a usage error. (The script runs from the checkout
    it lies in: here a copy of its tools beside one test folder.)"""
    import shutil

    (tmp_path / "tools").mkdir()
    for name in ("gpu-tests.sh", "parallel-tests.py", "parallel_tests_plugin.py"):
        shutil.copy(TOOL.parent / name, tmp_path / "tools" / name)
    tests = tmp_path / "packages" / "some-layer" / "tests"
    tests.mkdir(parents=True)
    (tests / "test_b.py").write_text(
        "import os\n\ndef test_one():\n    pass\n\ndef test_two():\n    pass\n\n"
        "def test_compiles_once():\n"
        "    assert os.environ['TRITON_CACHE_MANAGER'] == 'iris.testing.compile_once:CompileOnce'\n"
    )
    env = dict(os.environ, PYTEST_DISABLE_PLUGIN_AUTOLOAD="1", JOBS="2", LOGS=str(tmp_path / "logs"))
    env.pop("TRITON_CACHE_MANAGER", None)
    script = str(tmp_path / "tools" / "gpu-tests.sh")
    done = subprocess.run(["bash", script, "packages/some-layer/tests", "--", "-p", "no:cacheprovider"], env=env,
                          capture_output=True, text=True, timeout=300)  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    assert "total: 3 passed of 3 tests" in done.stdout, done.stdout
    # no tools/gpu-test-times/some-layer.txt: dealt in turns; this run's times written for the next
    assert sorted(os.listdir(tmp_path / "logs" / "some-layer")) == ["job-0.log", "job-1.log", "times.txt"]
    usage = subprocess.run(["bash", script], env=env, capture_output=True, text=True, timeout=60)
    assert usage.returncode == 2 and "name the test folders" in usage.stderr


def _tool_module():
    import importlib.util

    spec = importlib.util.spec_from_file_location("parallel_tests", TOOL)
    module = importlib.util.module_from_spec(spec)
    sys.path.insert(0, str(TOOL.parent))  # its plugin module lies beside it
    try:
        spec.loader.exec_module(module)
    finally:
        sys.path.remove(str(TOOL.parent))
    return module


def test_times_deal_the_longest_tests_first_to_the_least_loaded_job(tmp_path):
    """With an earlier run's seconds per test the jobs' totals come out even (dealt in turns, the
    two long tests of this selection share a job); a test without a time weighs the median; each
    job keeps collection order. Both line formats are read, a test's phases add up."""
    tool = _tool_module()
    times_file = tmp_path / "times.txt"
    times_file.write_text("# seconds per test\n9.0 t.py::a\n1.00s call t.py::c\n0.50s setup t.py::c\n"
                          "8.0 t.py::e\n1.0 t.py::b\nnot a line\n")  # fmt: skip
    times = tool.read_times(str(times_file))
    assert times == {"t.py::a": 9.0, "t.py::c": 1.5, "t.py::e": 8.0, "t.py::b": 1.0}
    ids = ["t.py::a", "t.py::b", "t.py::c", "t.py::d", "t.py::e"]
    assert tool._deal(ids, 2) == [["t.py::a", "t.py::d", "t.py::e"], ["t.py::b", "t.py::c"]]  # in turns
    # longest first: a (9) -> 0, e (8) -> 1, d (the median of 1, 1.5, 8, 9: 4.75) -> 1, c (1.5) -> 0, b -> 0
    assert tool._deal(ids, 2, times) == [["t.py::a", "t.py::b", "t.py::c"], ["t.py::d", "t.py::e"]]


def test_a_run_with_times_writes_every_test_s_seconds_for_the_next(tmp_path):
    (tmp_path / "test_s.py").write_text("import time\n\ndef test_slow():\n    time.sleep(0.7)\n\n"
                                        "def test_quick():\n    pass\n")  # fmt: skip
    (tmp_path / "times.txt").write_text("5.00 test_s.py::test_gone\n")
    done = _run(tmp_path, str(TOOL), "--jobs", "2", "--logs", "logs", "--times", "times.txt", "--", "test_s.py",
                "-p", "no:cacheprovider")  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    written = (tmp_path / "logs" / "times.txt").read_text().splitlines()
    assert written[0] == "5.00 test_s.py::test_gone"  # the earlier file's, kept
    assert len(written) == 2 and written[1].endswith(" test_s.py::test_slow"), written  # >= 0.5 s only
    assert 0.7 <= float(written[1].split()[0]) < 5, written
