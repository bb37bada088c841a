"""``gmp data synth``: generate a synthetic CTR dataset (see gmp.datasets.synth).

``cli/data.py`` calls :func:`register` with its ``data`` typer group.
"""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from cli._common import echo_json, handle_errors


def register(data_app: typer.Typer) -> None:
    """Add the ``synth`` command to the ``data`` group."""
    data_app.command("synth")(synth)


@handle_errors
def synth(
    out: Path = typer.Option(..., "--out", "-o", help="Output directory (a prepared dataset)."),
    preset: str = typer.Option("criteo-kaggle", "--preset",
                               help="Field layout: 'criteo-kaggle' (26 Criteo Kaggle cardinalities, "
                                    "45,840,617 samples in the real file) or 'tiny' (8 fields, for demos)."),
    samples: Optional[int] = typer.Option(None, "--samples", "-n",
                                          help="Number of samples (default: 1,000,000 for criteo-kaggle, "
                                               "20,000 for tiny)."),
    scale: float = typer.Option(1.0, "--scale", help="Multiply every field's cardinality (a field keeps at least min(its values, 100))."),
    seed: int = typer.Option(0, "--seed", help="Random seed; same seed, same data (any chunk size)."),
    skew: float = typer.Option(1.1, "--skew",
                               help="Zipf exponent of value popularity: higher = more accesses to the "
                                    "top 1% of embeddings, fewer distinct values."),
    tail: float = typer.Option(0.3, "--tail",
                               help="Share of draws spread uniformly over a field's values (long tail of "
                                    "rarely seen ids): higher = more distinct values."),
    communities: int = typer.Option(64, "--communities",
                                    help="Number of latent communities K; each owns a 1/K slice of the "
                                         "values of every high-cardinality field."),
    locality: float = typer.Option(0.7, "--locality",
                                   help="Probability in [0, 1] that a high-cardinality field's value comes "
                                        "from the sample's community slice (0 = no locality)."),
    local_threshold: Optional[int] = typer.Option(None, "--local-threshold",
                                                  help="A field is high-cardinality (local) when its unscaled "
                                                       "preset cardinality is >= this (default: 10,000 for "
                                                       "criteo-kaggle, 1,000 for tiny)."),
    test_fraction: float = typer.Option(0.1, "--test-fraction",
                                        help="The last fraction of samples is the test split."),
    chunk_samples: int = typer.Option(1 << 18, "--chunk-samples",
                                      help="Samples generated per chunk (bounds memory; does not change "
                                           "the data)."),
    overwrite: bool = typer.Option(False, "--overwrite", help="Replace an existing --out directory."),
) -> None:
    """Generate CTR-like data with power-law popularity, community locality, 13 dense features and
    labels from a hidden logistic model (its Bayes AUC is stored in dataset.json).

    Example: gmp data synth --preset criteo-kaggle --samples 1000000 --seed 0 --out data/criteo-1m
    """
    import math

    from gmp._io import check_disk, check_output_dir
    from gmp.datasets.synth import preset_config, synthesize
    from gmp.errors import DatasetError

    check_output_dir(out, kind="gmp.dataset", overwrite=overwrite)
    if not math.isfinite(scale):
        raise DatasetError(f"--scale must be a finite number > 0, got {scale}.")
    cfg = preset_config(preset, num_samples=samples, scale=scale, local_min_values=local_threshold,
                        seed=seed, skew=skew, tail=tail, num_communities=communities, locality=locality,
                        test_fraction=test_fraction)
    # the arrays (ids, row pointers, labels, dense) plus their raw temporaries, before any is written
    per_sample = 4 * len(cfg.cardinalities) + 8 + 4 + 4 * cfg.num_dense
    check_disk(out, 2 * per_sample * cfg.num_samples, what=f"--samples {cfg.num_samples:,}",
               fix="lower --samples or choose another --out.")
    meta = synthesize(cfg, out, chunk_samples=chunk_samples, overwrite=overwrite)
    synth_meta = meta["synth"]
    echo_json({
        "out": str(out),
        "num_samples": meta["num_samples"],
        "num_embeddings": meta["num_embeddings"],
        "num_edges": meta["num_edges"],
        "label_rate": round(meta["label_rate"], 4),
        "bayes_auc": round(synth_meta["bayes_auc"], 4),
        "local_fields": synth_meta["local_fields"],
        "sha256": meta["sha256"],
    })
