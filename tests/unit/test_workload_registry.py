"""The open workload registry: shipped workloads register themselves, others can join, names are
unique (that looking a workload up never imports PySpark is checked in test_layout.py)."""

from __future__ import annotations

import pytest

from sparkscale.registry import WORKLOADS
from sparkscale_lab.pipelines.workloads import Workload, register_workload, registered_workloads, workload


def _build(_ctx: object) -> list:
    return []


def _expected(_records: object, _app: object) -> dict[str, int]:
    return {}


@pytest.fixture
def registry(monkeypatch: pytest.MonkeyPatch) -> None:
    """A copy of the loaded registry for the test, so that what it registers does not outlive it."""
    registered_workloads()  # load the shipped ones first: the copy must hold them
    monkeypatch.setattr(WORKLOADS, "items", dict(WORKLOADS.items))


def test_a_registered_workload_is_found_and_listed(registry):
    extra = Workload(name="unit_extra", query="extra_q", fields=("line",), build=_build, expected_output=_expected)
    register_workload(extra)
    assert workload("unit_extra") is extra
    assert "unit_extra" in registered_workloads()
    assert {"wordcount", "dag", "taxi_top_routes"} <= set(registered_workloads())
    register_workload(extra)  # the same workload again: no error
    assert workload("unit_extra") is extra


def test_an_unknown_name_is_a_key_error_naming_the_known_ones():
    with pytest.raises(KeyError, match=r"no workload named 'nope' \(known: .*dag.*taxi_top_routes.*wordcount"):
        workload("nope")


def test_a_taken_name_refuses_a_different_workload(registry):
    shipped = workload("wordcount")
    impostor = Workload(name="wordcount", query=shipped.query, fields=shipped.fields, build=_build,
                        expected_output=_expected)
    with pytest.raises(ValueError, match="'wordcount'"):
        register_workload(impostor)
    assert workload("wordcount") is shipped
