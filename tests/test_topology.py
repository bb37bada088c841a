import json

import numpy as np
import pytest

from gmp.errors import TopologyError
from gmp.topology import hierarchical, homogeneous, load_topology, parse_topology, resolve_topology


def test_homogeneous():
    t = homogeneous(3)
    np.testing.assert_array_equal(t.cost, [[0, 1, 1], [1, 0, 1], [1, 1, 0]])
    assert t.is_uniform and t.num_machines == 1


def test_hierarchical_2x2_inter_cost_10():
    t = parse_topology("2x2")
    np.testing.assert_array_equal(t.cost, [[0, 1, 10, 10], [1, 0, 10, 10], [10, 10, 0, 1], [10, 10, 1, 0]])
    assert t.machine_of.tolist() == [0, 0, 1, 1] and t.num_machines == 2 and not t.is_uniform


def test_hierarchical_configurable_inter_cost():
    t = hierarchical(2, 8, inter_cost=4.0)
    assert t.num_workers == 16 and t.cost[0, 8] == 4.0 and t.cost[0, 7] == 1.0


def test_json_round_trip():
    t = parse_topology("2x3")
    u = type(t).from_json(json.loads(json.dumps(t.to_json())))
    np.testing.assert_array_equal(u.cost, t.cost)
    assert u.machine_of.tolist() == t.machine_of.tolist()


@pytest.mark.parametrize("machine_of, match", [
    ([0, 0, 1], r"2x2: machine_of must list one machine index per worker \(4\), got 3 entries\."),
    ([0, 0, 1, 1, 1], r"per worker \(4\), got 5 entries"),
    ([[0, 0], [1, 1]], r"per worker \(4\), got shape \(2, 2\)"),
    ([0, 0.5, 1, 1], r"machine_of must hold integer machine indices, got float64 values"),
])
def test_from_json_checks_machine_of_as_load_topology_does(machine_of, match):
    """A manifest's topology (Topology.from_json) took a machine_of of any length: 3 machines for 4 workers was
    accepted by report, train, simulate and export."""
    obj = parse_topology("2x2").to_json()
    obj["machine_of"] = machine_of
    with pytest.raises(TopologyError, match=match):
        type(parse_topology("2x2")).from_json(obj)


def test_the_constructor_checks_machine_of_length():
    from gmp.topology import Topology

    with pytest.raises(TopologyError, match=r"machine_of must list one machine index per worker \(2\), got 1"):
        Topology(np.array([[0.0, 1.0], [1.0, 0.0]]), name="t", machine_of=np.array([0], dtype=np.int32))


@pytest.mark.parametrize(
    "cost, match",
    [
        ([[0, 1, 1], [1, 0, 1]], "square"),
        ([[0, -1], [1, 0]], r"cost\[0\]\[1\] = -1.0 is negative"),
        ([[1, 1], [1, 0]], r"cost\[0\]\[0\] = 1.0; the diagonal must be 0"),
        ([[0, float("nan")], [1, 0]], "finite"),
    ],
)
def test_file_validation(tmp_path, cost, match):
    path = tmp_path / "costs.json"
    path.write_text(json.dumps({"cost": cost}).replace("NaN", "NaN"))
    with pytest.raises(TopologyError, match=match):
        load_topology(path)


def test_file_bare_list_and_errors(tmp_path):
    path = tmp_path / "c.json"
    path.write_text("[[0, 2], [3, 0]]")
    assert load_topology(path).cost[1, 0] == 3
    path.write_text("{not json")
    with pytest.raises(TopologyError, match="not valid JSON"):
        load_topology(path)
    with pytest.raises(TopologyError, match="cannot read topology file"):
        load_topology(tmp_path / "missing.json")
    path.write_text(json.dumps({"cost": [[0, 1], [1, 0]], "machine_of": [0]}))
    with pytest.raises(TopologyError, match="machine_of"):
        load_topology(path)
    # machine 1 holds no worker: hybrid's machine-level pass divided by its zero workers (a traceback)
    path.write_text(json.dumps({"cost": [[0, 9, 9, 1], [9, 0, 1, 9], [9, 1, 0, 9], [1, 9, 9, 0]],
                                "machine_of": [0, 2, 2, 0]}))
    with pytest.raises(TopologyError, match=r"number the machines 0..M-1 .* machine\(s\) \[1\] hold none"):
        load_topology(path)


def test_parse_and_resolve_errors():
    with pytest.raises(TopologyError, match="not understood"):
        parse_topology("2by8")
    with pytest.raises(TopologyError, match="`workers` 4 disagrees with the topology's 16 workers"):
        resolve_topology(4, "2x8", None)
    with pytest.raises(TopologyError, match="not both"):
        resolve_topology(None, "8", "f.json")
    assert resolve_topology(5, None, None).num_workers == 5


@pytest.mark.parametrize("machine_of, match", [
    (["a", "b"], r"machine_of must hold integer machine indices, got text values"),   # was a ValueError traceback
    ([1e12, 0], r"machine_of must hold integer machine indices, got float64 values"),  # was an OverflowError
    ([10**12, 0], r"machine_of must number the machines 0..M-1 .*; got 1000000000000"),  # int32 overflow
    ([2**64, 0], r"machine_of must list one integer machine index per worker \(2\)"),
    ([0.5, 1.7], r"machine_of must hold integer machine indices, got float64 values"),  # was truncated to [0, 1]
    ([True, False], r"machine_of must hold integer machine indices, got true/false values"),  # was cast to [1, 0]
])
def test_a_topology_file_refuses_what_a_manifest_refuses(tmp_path, machine_of, match):
    """One rule for a file and a manifest's topology: gmp wrote manifests from files it then refused to read."""
    path = tmp_path / "t.json"
    path.write_text(json.dumps({"cost": [[0, 1], [1, 0]], "machine_of": machine_of}))
    with pytest.raises(TopologyError, match=match):
        load_topology(path)
    with pytest.raises(TopologyError, match=match):
        type(homogeneous(2)).from_json({"name": "2", "cost": [[0, 1], [1, 0]], "machine_of": machine_of})


def test_a_topology_name_must_be_a_string(tmp_path):
    """{"x": [1, 2]} was stringified into the manifest's name."""
    path = tmp_path / "t.json"
    path.write_text(json.dumps({"cost": [[0, 1], [1, 0]], "name": {"x": [1, 2]}}))
    with pytest.raises(TopologyError, match=r"'name' must be a string, got \{\"x\": \[1, 2\]\}"):
        load_topology(path)
    with pytest.raises(TopologyError, match="'name' must be a string"):
        type(homogeneous(2)).from_json({"name": 7, "cost": [[0, 1], [1, 0]]})
    path.write_text(json.dumps({"cost": [[0, 1], [1, 0]], "name": "pair", "machine_of": [0, 1]}))
    t = load_topology(path)
    assert t.name == "pair" and t.machine_of.tolist() == [0, 1] and t.machine_of.dtype == np.int32


def test_costs_are_bounded_so_their_sums_stay_finite(tmp_path):
    """--inter-cost 1e308 wrote NaN and Infinity into report.json and manifest.json."""
    from gmp.topology import MAX_COST

    assert MAX_COST * 2.0**63 * 2048**2 < 1e300   # the largest weighted sum is still finite
    with pytest.raises(TopologyError, match=r"`inter_cost` 1e\+308 is above 1e\+12") as exc:
        hierarchical(2, 2, inter_cost=1e308)
    assert exc.value.param == "inter_cost"
    assert hierarchical(2, 2, inter_cost=MAX_COST).cost[0, 2] == MAX_COST
    path = tmp_path / "t.json"
    path.write_text(json.dumps({"cost": [[0, 1e13], [1, 0]]}))
    with pytest.raises(TopologyError, match=r"cost\[0\]\[1\] = 1e\+13 is above 1e\+12"):
        load_topology(path)


def test_workers_disagreeing_with_a_one_worker_topology_reads_right():
    with pytest.raises(TopologyError, match="`workers` 3 disagrees with the topology's 1 worker\\.$"):
        resolve_topology(3, "1", None)
