"""The pure loss/duplication comparisons of pipeline/verify.py."""

from __future__ import annotations

from collections import Counter

from sparkscale_lab.pipelines.verify import VerifyResult, compare_keyed, compare_records


def test_records_exactly_once_is_ok():
    result = compare_records(["a", "b", "c"], Counter({"a": 1, "b": 1, "c": 1}))
    assert result == VerifyResult(3, 3, lost=0, duplicated=0, mismatched_keys=(), unexpected=0, kind="records")
    assert result.ok


def test_records_lost_and_duplicated_are_counted_separately():
    result = compare_records(["a", "b", "c", "d"], Counter({"a": 3, "b": 1}))
    assert result.lost == 2  # c, d
    assert result.duplicated == 2  # a arrived twice more than once
    assert result.total_expected == 4
    assert result.total_arrived == 4
    assert result.mismatched_keys == ("a", "c", "d")
    assert not result.ok


def test_records_unexpected_arrivals_are_neither_lost_nor_duplicated():
    result = compare_records(["a"], {"a": 1, "zz": 2})
    assert (result.lost, result.duplicated, result.unexpected) == (0, 0, 2)
    assert result.mismatched_keys == ("zz",)
    assert not result.ok


def test_records_expected_twice_must_arrive_twice():
    assert compare_records(["a", "a"], {"a": 2}).ok
    once = compare_records(["a", "a"], {"a": 1})
    assert (once.lost, once.duplicated) == (1, 0)


def test_records_zero_arrivals_in_counter_do_not_count():
    result = compare_records(["a"], Counter({"a": 1, "b": 0}))
    assert result.ok


def test_records_nothing_arrived():
    result = compare_records(["a", "b"], Counter())
    assert (result.total_arrived, result.lost, result.duplicated) == (0, 2, 0)


def test_keyed_equal_is_ok():
    result = compare_keyed({"x": 3, "y": 1}, {"x": 3, "y": 1})
    assert result.ok
    assert (result.total_expected, result.total_arrived, result.kind) == (4, 4, "keyed")


def test_keyed_deficit_is_lost_surplus_is_duplicated():
    result = compare_keyed({"x": 5, "y": 2, "z": 4}, {"x": 3, "y": 6})
    assert result.lost == 2 + 4  # x short by 2, z missing entirely
    assert result.duplicated == 4  # y over by 4
    assert result.total_expected == 11
    assert result.total_arrived == 9
    assert result.mismatched_keys == ("x", "y", "z")


def test_keyed_extra_key_is_unexpected():
    result = compare_keyed({"x": 1}, {"x": 1, "w": 7})
    assert (result.lost, result.duplicated, result.unexpected) == (0, 0, 7)
    assert result.mismatched_keys == ("w",)
    assert not result.ok


def test_keyed_non_numeric_values_are_listed_not_counted():
    result = compare_keyed({"route": "a->b"}, {"route": "a->c"})
    assert (result.lost, result.duplicated) == (0, 0)
    assert result.mismatched_keys == ("route",)
    assert result.notes and "a->c" in result.notes[0]
    assert not result.ok


def test_summary_and_dict_report_the_figures():
    result = compare_records([f"u{i}" for i in range(30)], {})
    text = result.summary()
    assert "lost 30" in text and "+20 more" in text
    assert result.to_dict()["ok"] is False
    assert result.to_dict()["lost"] == 30
