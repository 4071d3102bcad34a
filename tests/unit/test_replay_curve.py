"""`plookup bench --replay RUN --cost-curve FILE|flat`: another machine's curve for a recorded run."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from plookup.app.bench.command import given_cost_curve

H200 = Path(__file__).resolve().parents[2] / "docs" / "cost-curve-h200-smollm2-q4_1.json"


def test_flat_and_files_of_every_kind(tmp_path):
    assert given_cost_curve("flat", 4).tolist() == [1.0] * 5
    for name, content in [("list", [2.0, 3.0, 4.0]), ("doctor", {"settings": [{"cost": [2.0, 3.0, 4.0]}]}),
                          ("bench", {"workloads": [], "cost_curve": [2.0, 3.0, 4.0]})]:
        path = tmp_path / f"{name}.json"
        path.write_text(json.dumps(content))
        assert given_cost_curve(str(path), 16).tolist() == [1.0, 1.5, 2.0], name  # relative to one token


def test_the_published_h200_curve_loads():
    cost = given_cost_curve(str(H200), 16)
    assert cost[1] == pytest.approx(2.56) and cost[15] == pytest.approx(3.45)
    assert np.all(np.diff(cost) >= 0)


@pytest.mark.parametrize("content", ["[1, 2, \"x\"]", "{}", "[0, 1]", "not json"])
def test_a_file_without_a_curve_is_refused_by_name(tmp_path, content):
    path = tmp_path / "curve.json"
    path.write_text(content)
    with pytest.raises(ValueError, match="--cost-curve .*curve.json"):
        given_cost_curve(str(path), 16)
