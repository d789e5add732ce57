"""iris.ccl.tuning: all_reduce's "auto" table, host code only (no ranks)."""

import pytest
import torch

from iris.ccl import tuning
from iris.ccl.workspace import PUSH_BYTES


def test_every_measured_table_is_valid_and_small_inputs_meet_once():
    for cap, table in tuning.ALL_REDUCE_AUTO.items():
        for w, rows in table.items():
            assert tuning.check_rows(rows, f"{cap} {w}") is rows
    assert tuning.all_reduce_auto(1024, 4, torch.device("cpu")) == "one_shot_push"
    assert tuning.all_reduce_auto(tuning.AUTO_PUSH_BYTES, 2, torch.device("cpu")) == "one_shot_push"
    assert tuning.all_reduce_auto(tuning.AUTO_PUSH_BYTES + 4, 2, torch.device("cpu")) == "two_shot"


@pytest.mark.parametrize(
    "rows, says",
    [
        ((), "last row"),
        (((1024, "two_shot"),), "last row"),
        (((4096, "one_shot"), (1024, "two_shot"), (None, "rs_ag")), "increasing"),
        (((0, "one_shot"), (None, "rs_ag")), "positive"),
        (((1024, "auto"), (None, "two_shot")), "unknown variant"),
        (((1024, "three_shot"), (None, "two_shot")), "unknown variant"),
        (((2 * PUSH_BYTES, "one_shot_push"), (None, "two_shot")), "at most"),
        (((None, "one_shot_push"),), "at most"),
    ],
)
def test_a_bad_table_is_refused_saying_why(rows, says):
    with pytest.raises(ValueError, match=says):
        tuning.check_rows(rows)


def test_a_world_size_without_rows_takes_the_nearest_measured_one(monkeypatch):
    two, eight = ((4096, "one_shot"), (None, "rs_ag")), ((None, "two_shot"),)
    monkeypatch.setitem(tuning.ALL_REDUCE_AUTO, (1, 0), {2: two, 8: eight})
    assert tuning.rows_for((1, 0), 1) is two
    assert tuning.rows_for((1, 0), 4) is two
    assert tuning.rows_for((1, 0), 5) is two  # a tie goes to the smaller world size
    assert tuning.rows_for((1, 0), 6) is eight
    assert tuning.rows_for((1, 0), 64) is eight
    assert tuning.rows_for((7, 5), 2) is tuning.FALLBACK  # a kind without a table
    assert tuning.rows_for(None, 2) is tuning.FALLBACK  # CPU ranks
