"""The verdict: a result that differs from torch is found, located and turned into exit status 1."""

import argparse

import torch

from iris.examples import message_passing
from iris.examples.harness import validation


def test_compare_accepts_the_torch_reference():
    expected = message_passing.payload(3, 4096, torch.bfloat16)
    assert validation.compare(expected.clone(), expected, rank=0, what="blocks") is None


def test_compare_finds_a_corrupted_element():
    expected = message_passing.payload(1, 4096, torch.float32)
    got = expected.clone()
    got[1234] += 1
    got[4000] = 0
    m = validation.compare(got, expected, rank=2, what="blocks received from rank 1")
    assert (m.rank, m.index, m.count, m.numel) == (2, (1234,), 2, 4096)
    assert (m.expected, m.got) == (expected[1234].item(), expected[1234].item() + 1)
    assert "rank 2" in str(m) and "index [1234]" in str(m)


def test_compare_finds_a_shape_difference_and_respects_tolerances():
    expected = torch.ones(8)
    assert validation.compare(torch.ones(9), expected, rank=0, what="x") is not None
    assert validation.compare(expected + 1e-6, expected, rank=0, what="x", rtol=1e-5) is None
    assert validation.compare(expected + 1e-6, expected, rank=0, what="x") is not None


def test_a_mismatch_makes_the_report_return_1(capsys):
    expected = message_passing.payload(0, 64, torch.float32)
    got = expected.clone()
    got[7] = -1
    mismatch = validation.compare(got, expected, rank=1, what="blocks received from rank 0")
    row = {"rank": 1, "to_rank": 0, "from_rank": 0, "bytes": 256, "time_us": 1.0, "GBps": 0.1, "check": "MISMATCH",
           "dtype": "float32", "backend": "triton"}  # fmt: skip
    args = argparse.Namespace(backend="triton", ranks=2, blocks=1, block_size=256, csv=None, plot=None)
    assert message_passing.report([{"row": row, "mismatches": [mismatch], "gpu": False}], args) == 1
    assert "MISMATCHES" in capsys.readouterr().out
    ok = dict(row, check="ok")
    assert message_passing.report([{"row": ok, "mismatches": [], "gpu": False}], args) == 0
