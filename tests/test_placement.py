"""Placement.check: every invariant violation is caught and named."""

from __future__ import annotations

import numpy as np
import pytest

from gmp.errors import PlacementError
from gmp.placement import Placement


def _placement(indptr, workers, primary=(0, 1, 2, 0)):
    base = Placement.edge_cut(3, np.array([0, 1, 2], dtype=np.int32), np.array(primary, dtype=np.int32))
    return base.with_secondaries(np.array(indptr, dtype=np.int64), np.array(workers, dtype=np.int32))


def test_valid_placement_passes():
    _placement([0, 2, 2, 3, 3], [1, 2, 0]).check(num_samples=3, num_embeddings=4)
    Placement.edge_cut(3, np.zeros(3, dtype=np.int32), np.zeros(4, dtype=np.int32)).check()


@pytest.mark.parametrize("indptr, workers, message", [
    ([0, 2, 1, 3, 3], [1, 2, 0], r"non-decreasing from 0 to len\(secondary_workers\) = 3, but it decreases at "
                                 r"position 2 \(secondary_indptr\[1\] = 2, secondary_indptr\[2\] = 1\)\.$"),
    ([1, 2, 2, 3, 3], [1, 2, 0], r"non-decreasing .*, got 1\.\.3\.$"),  # does not start at 0
    ([0, 1, 1, 2, 2], [1, 2, 0], r"non-decreasing .*, got 0\.\.2\.$"),  # does not end at len(workers)
    ([0, 2, 2, 3, 3], [1, 1, 0], "embedding 0 lists the same secondary worker twice"),
    ([0, 1, 2, 3, 3], [1, 1, 0], "embedding 1 has a secondary on its primary's worker"),
    ([0, 0, 0, 0, 1], [0], "embedding 3 has a secondary on its primary's worker"),
    ([0, 0, 0, 0, 1], [3], r"outside \[0, 3\)"),
])
def test_invalid_secondaries_are_named(indptr, workers, message):
    with pytest.raises(PlacementError, match=message):
        _placement(indptr, workers).check()


def test_sizes_must_match_the_graph():
    p = _placement([0, 0, 0, 0, 0], [])
    with pytest.raises(PlacementError, match="3 entries, the graph 4 samples"):
        p.check(num_samples=4)
    with pytest.raises(PlacementError, match="4 entries, the graph 5 embeddings"):
        p.check(num_embeddings=5)


@pytest.mark.parametrize("make, message", [
    # a list given to the constructor itself (edge_cut converts, the dataclass does not): one line, not an
    # AttributeError on list.ndim
    (lambda: Placement(2, [0, 1], np.zeros(2, np.int32), np.zeros(3, np.int64), np.zeros(0, np.int32)),
     r"sample_worker must be 1-D int32, got int64 \(2,\)\."),
    (lambda: Placement("2", np.zeros(2, np.int32), np.zeros(2, np.int32), np.zeros(3, np.int64),
                       np.zeros(0, np.int32)), r"num_workers must be an int >= 1, got '2'\."),
])
def test_check_refuses_what_the_constructor_was_given_as_is(make, message):
    with pytest.raises(PlacementError, match=message):
        make().check()
