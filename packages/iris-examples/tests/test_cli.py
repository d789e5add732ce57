"""The command line: --list, exit status 2 on bad usage with a message that says what to do."""

import importlib

import pytest
from _cli import run_cli

from iris.examples import EXAMPLES


def test_list_names_every_example():
    done = run_cli("--list")
    assert done.returncode == 0, done.stderr
    for name in EXAMPLES:
        assert name in done.stdout


@pytest.mark.parametrize("name", list(EXAMPLES))
def test_registry_summary_is_the_modules(name):
    example = EXAMPLES[name]
    module = importlib.import_module(example.module)
    if not example.fixed_backend:  # a module serving several examples names each one's summary
        assert getattr(module, "SUMMARIES", {}).get(name, getattr(module, "SUMMARY", None)) == example.summary
    for attr in ("add_arguments", "rank_main", "report"):
        assert callable(getattr(module, attr))


def test_gluon_names_fix_the_gluon_backend():
    for name, example in EXAMPLES.items():
        if name.endswith("-gluon"):
            assert example.backend == "gluon"
        if example.backend == "gluon":  # a -gluon variant, or an example of Gluon alone (gluon-rma-bench)
            assert "gluon" in name


@pytest.mark.parametrize(
    "argv, words",
    [
        (["no-such-example"], ["no example called 'no-such-example'", "message-passing"]),
        ([], ["name an example"]),
        (["message-passing", "--ranks", "0"], ["--ranks", "at least 1"]),
        (["all-load", "12Q"], ["cannot read '12Q' as a size"]),
        (["message-passing", "--block-size", "1.5M"], ["cannot read '1.5M' as a size"]),
        (["atomic-latency", "--backend", "gluon"], ["implements only the triton backend"]),
        (["message-passing-gluon", "--backend", "triton"], ["runs the gluon backend"]),
        (["atomic-latency", "--ranks", "1"], ["at least 2 ranks"]),
        (["message-passing", "--dtype", "float33"], ["unknown dtype 'float33'"]),
        (["ccl-bench", "--collectives", "all_sum"], ["unknown collective 'all_sum'"]),
        (["ccl-bench", "--block-size", "100"], ["block_size", "power of two"]),
        (["heap-bench", "--backend", "triton"], ["runs no kernels"]),
    ],
)
def test_bad_usage_exits_2_and_says_why(argv, words):
    done = run_cli(*argv)
    assert done.returncode == 2, (done.stdout, done.stderr)
    for word in words:
        assert word in done.stderr
