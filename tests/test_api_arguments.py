"""The facade's keywords of the wrong type: one-line GmpError subclasses naming the parameter, never a builtin's
TypeError/ValueError/AttributeError from deep inside, and never a wrong value taken as true (``overwrite='no'``
replaced a manifest)."""

from __future__ import annotations

import json

import pytest

import gmp
from gmp.errors import DatasetError, ManifestError, OutputError, PartitionError, TrainingError


@pytest.fixture(scope="module")
def made(tmp_path_factory):
    """A synthetic dataset and a random placement of it on 2 workers."""
    root = tmp_path_factory.mktemp("api_arguments")
    ds = gmp.synthesize(root / "ds", preset="tiny", num_samples=300, seed=1)
    m = gmp.partition_dataset(ds, "random", root / "m", workers=2, batch_size=8, plots=False)
    return root, ds, m


CASES = {
    # (call(root, ds, m), error, message)
    "export into a file": (lambda r, ds, m: gmp.export_torchrec(m, r / "ds" / "dataset.json", dataset=ds),
                           OutputError, r"`out` .*dataset\.json exists and is not a directory; choose another `out`\.$"),
    "export unknown keyword": (lambda r, ds, m: gmp.export_torchrec(m, r / "x", dataset=ds, bogus=1),
                               ManifestError, r"export_torchrec: unknown option\(s\) bogus; it takes: cache_lookups, "
                                              r"load_factors, overwrite\.$"),
    "export overwrite 'no'": (lambda r, ds, m: gmp.export_torchrec(m, r / "x", dataset=ds, overwrite="no"),
                              ManifestError, r"The 'overwrite' parameter must be a bool, got 'no'\.$"),
    "export load_factors a number": (lambda r, ds, m: gmp.export_torchrec(m, r / "x", dataset=ds, load_factors=0.5),
                                     ManifestError, r"The 'load_factors' parameter must be a sequence of fractions "
                                                    r"in \(0, 1\] \(e\.g\. \(0\.01, 0\.1, 0\.5\)\), got 0\.5\.$"),
    "export out an int": (lambda r, ds, m: gmp.export_torchrec(m, 7, dataset=ds), OutputError,
                          r"The 'out' parameter must be the export's directory \(a str or os\.PathLike\), got int\.$"),
    "partition options a list": (lambda r, ds, m: gmp.partition_dataset(ds, "hybrid", r / "p", workers=2,
                                                                         options=["rounds=3"]),
                                 PartitionError, r"The 'options' parameter must be a mapping of option names to "
                                                 r"values \(e\.g\. \{'rounds': 3\}\), got \['rounds=3'\]\.$"),
    "compare options of a method a string": (lambda r, ds, m: gmp.compare_partitioners(
        ds, "random", workers=2, options={"random": "per_field=1"}), PartitionError,
        r"The 'options' parameter must be a mapping of method names to mappings of their options"),
    "load_manifest dataset an int": (lambda r, ds, m: gmp.load_manifest(m.path, dataset=7), DatasetError,
                                     r"dataset must be a prepared dataset \(its directory, or gmp\.load_dataset\(\.\.\.\)\), "
                                     r"got int\.$"),
    "load_manifest path an int": (lambda r, ds, m: gmp.load_manifest(7), ManifestError,
                                  r"The 'path' parameter must be a placement manifest's directory"),
    "load_dataset path an int": (lambda r, ds, m: gmp.load_dataset(5), DatasetError,
                                 r"The 'path' parameter must be a prepared dataset's directory \(a str or "
                                 r"os\.PathLike\), got int\.$"),
    "train hidden empty": (lambda r, ds, m: gmp.train_model(ds, m, hidden=(), epochs=1), TrainingError,
                           r"The 'hidden' parameter must be comma-separated layer widths \(e\.g\. 512,256,128\) or a "
                           r"sequence of them, got \(\)\.$"),
    "train hidden a number": (lambda r, ds, m: gmp.train_model(ds, m, hidden=64, epochs=1), TrainingError,
                              r"The 'hidden' parameter must be comma-separated layer widths"),
    "train resume 'yes'": (lambda r, ds, m: gmp.train_model(ds, m, resume="yes"), TrainingError,
                           r"The 'resume' parameter must be a bool, got 'yes'\.$"),
    "compare isolate 'yes'": (lambda r, ds, m: gmp.compare_partitioners(ds, "random", workers=2, isolate="yes"),
                              PartitionError, r"The 'isolate' parameter must be a bool, got 'yes'\.$"),
    "partition plots 'no'": (lambda r, ds, m: gmp.partition_dataset(ds, "random", r / "p", workers=2, plots="no"),
                             PartitionError, r"The 'plots' parameter must be a bool, got 'no'\.$"),
    "repartition compare_full 1": (lambda r, ds, m: gmp.repartition_dataset(ds, m, r / "p", compare_full=1),
                                   PartitionError, r"The 'compare_full' parameter must be a bool, got 1\.$"),
    "repartition old_manifest an int": (lambda r, ds, m: gmp.repartition_dataset(ds, 7, r / "p"), ManifestError,
                                        r"old_manifest must be a placement manifest .* got int\.$"),
    "report plots 'no'": (lambda r, ds, m: gmp.make_report(m, plots="no"), ManifestError,
                          r"The 'plots' parameter must be a bool, got 'no'\.$"),
    "report manifest an int": (lambda r, ds, m: gmp.make_report(7), ManifestError,
                               r"manifest must be a placement manifest .* got int\.$"),
    "simulate manifest an int": (lambda r, ds, m: gmp.simulate_epoch(ds, 7), ManifestError,
                                 r"manifest must be a placement manifest .* got int\.$"),
    "simulate dataset an int": (lambda r, ds, m: gmp.simulate_epoch(7, m), DatasetError,
                                r"dataset must be a prepared dataset .* got int\.$"),
    "synthesize overwrite 'no'": (lambda r, ds, m: gmp.synthesize(r / "s", preset="tiny", num_samples=100,
                                                                  overwrite="no"),
                                  DatasetError, r"The 'overwrite' parameter must be a bool, got 'no'\.$"),
    "load_dataset mmap 'no'": (lambda r, ds, m: gmp.load_dataset(ds.path, mmap="no"), DatasetError,
                               r"The 'mmap' parameter must be a bool, got 'no'\.$"),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_a_wrong_keyword_is_one_gmp_error(made, case):
    call, error, message = CASES[case]
    with pytest.raises(error, match=message) as info:
        call(*made)
    assert "\n" not in str(info.value)


def test_overwrite_no_is_refused_and_the_manifest_kept(made):
    """``overwrite='no'`` was truthy: partition_dataset replaced the manifest it was asked not to replace."""
    root, ds, m = made
    before = json.loads((m.path / "manifest.json").read_text())
    with pytest.raises(PartitionError, match=r"The 'overwrite' parameter must be a bool, got 'no'\.$"):
        gmp.partition_dataset(ds, "random", m.path, workers=2, seed=9, overwrite="no")
    assert json.loads((m.path / "manifest.json").read_text()) == before


def test_the_cli_refuses_an_empty_hidden_as_the_api_now_does(made):
    """The API's refusal of ``hidden=()`` words the CLI's refusal of ``--hidden ''``."""
    from typer.testing import CliRunner

    from cli.main import app

    _, ds, m = made
    r = CliRunner().invoke(app, ["train", str(ds.path), "--manifest", str(m.path), "--hidden", "", "--epochs", "1"])
    assert r.exit_code == 2 and "--hidden must be comma-separated layer widths (e.g. 512,256,128)" in r.output, r.output
