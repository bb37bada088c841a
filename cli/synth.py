"""``gmp data synth``: generate a synthetic CTR dataset (see gmp.datasets.synth).

``cli/data.py`` calls :func:`register` with its ``data`` typer group.
"""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from cli._common import check_seed, echo_json, handle_errors, refuse_flags

#: the generator's defaults; --continue refuses any other value (the next day keeps PREVIOUS's generator)
DEFAULT_PRESET = "criteo-kaggle"
DEFAULT_SCALE = 1.0


def register(data_app: typer.Typer) -> None:
    """Add the ``synth`` command to the ``data`` group."""
    data_app.command("synth")(synth)


@handle_errors
def synth(
    out: Path = typer.Option(..., "--out", "-o", help="Output directory (a prepared dataset)."),
    preset: str = typer.Option(DEFAULT_PRESET, "--preset",
                               help="Field layout and model: 'criteo-kaggle' (26 Criteo Kaggle cardinalities, "
                                    "latent-entity model fitted to real Criteo rows and Criteo's vocabulary), "
                                    "'criteo-kaggle-entity' (its issue-13 version, 1.36M values at full size), "
                                    "'criteo-kaggle-independent' "
                                    "(the same fields drawn independently, the generator before issue 13) or "
                                    "'tiny' (8 independent fields, for demos)."),
    like: Optional[Path] = typer.Option(None, "--like", metavar="DATASET",
                                        help="Fit the latent-entity model to this prepared dataset's stats "
                                             "(cardinalities, skew, mutual information) instead of a preset."),
    samples: Optional[int] = typer.Option(None, "--samples", "-n",
                                          help="Number of samples (default: 1,000,000 for criteo-kaggle, "
                                               "20,000 for tiny, the dataset's count with --like)."),
    scale: float = typer.Option(DEFAULT_SCALE, "--scale", help="Multiply every field's cardinality and entity count (a field keeps at least min(its values, 100))."),
    seed: int = typer.Option(0, "--seed", help="Random seed; same seed, same data (any chunk size)."),
    skew: Optional[float] = typer.Option(None, "--skew",
                                         help="Zipf exponent of value popularity (default 1.1; criteo-kaggle: "
                                              "fitted per field, which this replaces): higher = more "
                                              "accesses to the top 1% of embeddings, fewer distinct values."),
    tail: Optional[float] = typer.Option(None, "--tail",
                                         help="Share of draws spread uniformly over a field's values or a type's "
                                              "entities (default 0.3; criteo-kaggle: fitted per field, which "
                                              "this replaces): higher = more distinct values."),
    communities: Optional[int] = typer.Option(None, "--communities",
                                              help="Number of latent communities K (default 64); independent "
                                                   "presets: each owns a 1/K slice of every local field."),
    locality: Optional[float] = typer.Option(None, "--locality",
                                             help="Independent presets: probability in [0, 1] that a local "
                                                  "field's value comes from the sample's community slice "
                                                  "(default 0.7)."),
    local_threshold: Optional[int] = typer.Option(None, "--local-threshold",
                                                  help="Independent presets: a field is local when its unscaled "
                                                       "preset cardinality is >= this (default: 10,000 for "
                                                       "criteo-kaggle-independent, 1,000 for tiny)."),
    entity_skew: Optional[float] = typer.Option(None, "--entity-skew",
                                                help="Entity model: Zipf exponent of entity popularity "
                                                     "(criteo-kaggle: 1.1)."),
    fidelity: Optional[float] = typer.Option(None, "--fidelity",
                                             help="Entity model: probability in [0, 1] that a field shows its "
                                                  "entity's attribute (0 = independent fields)."),
    coherence: Optional[float] = typer.Option(None, "--coherence",
                                              help="Entity model: probability in [0, 1] that an attribute is "
                                                   "shared by the entity's whole segment."),
    fresh: Optional[float] = typer.Option(None, "--fresh",
                                          help="Entity model: probability in [0, 1] that an id-like field "
                                               "(at least as many values as its entities) shows a uniformly "
                                               "drawn rarely-seen value instead of its entity (default 0; "
                                               "criteo-kaggle has one fitted per field: use "
                                               "criteo-kaggle-entity)."),
    min_count: int = typer.Option(1, "--min-count",
                                  help="As gmp data import's: values seen fewer times share their field's rare id "
                                       "(1 keeps every value; > 1 costs a first counting pass)."),
    test_fraction: float = typer.Option(0.1, "--test-fraction",
                                        help="The last fraction of samples is the test split."),
    chunk_samples: int = typer.Option(1 << 18, "--chunk-samples",
                                      help="Samples generated per chunk (bounds memory; does not change "
                                           "the data)."),
    overwrite: bool = typer.Option(False, "--overwrite", help="Replace an existing --out directory."),
    continue_from: Optional[Path] = typer.Option(
        None, "--continue", metavar="PREVIOUS",
        help="Make the next day of this synthetic dataset: its ids stay, new values get new ids after them, "
             "community popularity drifts (gmp.datasets.synth_continue). Uses --samples, --seed (0: PREVIOUS's), "
             "--test-fraction, --growth and --drift; the other knobs come from PREVIOUS."),
    growth: Optional[float] = typer.Option(None, "--growth", help="With --continue: share of new values per field "
                                           "per day (default 0.02)."),
    drift: Optional[float] = typer.Option(None, "--drift", help="With --continue: standard deviation of the daily "
                                          "random-walk step of each community's log-weight (default 0.5)."),
    as_json: bool = typer.Option(False, "--json", help="Print a JSON summary instead of one line for people."),
) -> None:
    """Generate CTR-like data: latent entities (users, items, contexts) whose attributes the fields
    express, power-law popularity, 13 dense features and labels from a hidden logistic model (its
    Bayes AUC is stored in dataset.json). See docs/synth.md.

    Example: gmp data synth --preset criteo-kaggle --samples 1000000 --seed 0 --out data/criteo-1m
    """
    import math
    from dataclasses import replace

    from gmp._io import check_disk, check_output_dir
    from gmp.datasets.format import DATASET_FILES
    from gmp.datasets.synth import preset_config, synthesize
    from gmp.errors import DatasetError

    check_output_dir(out, kind="gmp.dataset", overwrite=overwrite, own=DATASET_FILES,
                     inputs=[p for p in (continue_from, like) if p is not None])
    if continue_from is not None:  # the next day (issue 18): ids of PREVIOUS stay, new ones are appended
        from gmp.datasets.synth_continue import continue_synth

        check_seed(seed)
        kept = {"--preset": preset != DEFAULT_PRESET, "--like": like is not None, "--scale": scale != DEFAULT_SCALE,
                "--skew": skew is not None, "--tail": tail is not None, "--communities": communities is not None,
                "--locality": locality is not None, "--local-threshold": local_threshold is not None,
                "--entity-skew": entity_skew is not None, "--fidelity": fidelity is not None,
                "--coherence": coherence is not None, "--fresh": fresh is not None, "--min-count": min_count != 1}
        refuse_flags(kept, f"--continue: the next day keeps {continue_from}'s generator (it takes --samples, "
                           f"--seed, --test-fraction, --growth and --drift).", DatasetError)
        day_knobs = {k: v for k, v in (("growth", growth), ("drift", drift)) if v is not None}  # else its defaults
        meta = continue_synth(continue_from, out, num_samples=samples, seed=seed if seed else None,
                              test_fraction=test_fraction, overwrite=overwrite, **day_knobs)
        day = meta["synth_continue"]
        summary = {"out": str(out), "day": day["day"], "num_samples": meta["num_samples"],
                   "num_embeddings": meta["num_embeddings"], "num_new_ids": day["num_new_ids"],
                   "parent": meta["parent"]["sha256"], "sha256": meta["sha256"]}
        if as_json:
            echo_json(summary)
        else:
            typer.echo(f"generated day {day['day']} after {continue_from}: {meta['num_samples']:,} samples, "
                       f"{day['num_new_ids']:,} new ids ({meta['num_embeddings']:,} in all) -> {out}")
        return
    if growth is not None or drift is not None:
        raise DatasetError("--growth and --drift apply to --continue PREVIOUS (the next day of a synthetic dataset).")
    if not math.isfinite(scale):
        raise DatasetError(f"--scale must be a finite number > 0, got {scale}.")

    knobs = {k: v for k, v in (("skew", skew), ("tail", tail), ("num_communities", communities),
                               ("locality", locality), ("entity_skew", entity_skew), ("fidelity", fidelity),
                               ("coherence", coherence), ("fresh", fresh)) if v is not None}
    if like is not None:
        from gmp.datasets.format import load_dataset
        from gmp.datasets.synth_fit import like_config

        if local_threshold is not None or locality is not None:
            raise DatasetError("synth: --locality and --local-threshold do not apply to --like "
                               "(the latent-entity model has no community slices).")
        fit = like_config(load_dataset(like), num_samples=samples, seed=seed)
        cfg = replace(fit.config, test_fraction=test_fraction, **knobs)
    else:
        entity_only = [f"--{k.replace('_', '-')}" for k in ("entity_skew", "fidelity", "coherence", "fresh")
                       if k in knobs]
        from gmp.datasets.synth import PRESETS

        if entity_only and preset in PRESETS and PRESETS[preset].model != "entities":
            raise DatasetError(f"synth: {', '.join(entity_only)} apply to the latent-entity model "
                               f"('criteo-kaggle' or --like), not to preset {preset!r}.")
        cfg = preset_config(preset, num_samples=samples, scale=scale, local_min_values=local_threshold,
                            seed=seed, test_fraction=test_fraction, **knobs)
    # the arrays (ids, row pointers, labels, dense) plus their raw temporaries, before any is written
    per_sample = 4 * len(cfg.cardinalities) + 8 + 4 + 4 * cfg.num_dense
    check_disk(out, 2 * per_sample * cfg.num_samples, what=f"--samples {cfg.num_samples:,}",
               fix="lower --samples or choose another --out.")
    meta = synthesize(cfg, out, chunk_samples=chunk_samples, overwrite=overwrite, min_count=min_count)
    synth_meta = meta["synth"]
    summary = {
        "out": str(out),
        "model": synth_meta.get("model", "independent"),
        "num_samples": meta["num_samples"],
        "num_embeddings": meta["num_embeddings"],
        "num_edges": meta["num_edges"],
        "label_rate": round(meta["label_rate"], 4),
        "bayes_auc": round(synth_meta["bayes_auc"], 4),
        "local_fields": synth_meta["local_fields"],
        "sha256": meta["sha256"],
    }
    if as_json:
        echo_json(summary)
        return
    typer.echo(f"generated {summary['num_samples']:,} samples ({meta['split']['num_test']:,} test), "
               f"{summary['num_embeddings']:,} embeddings, {summary['num_edges']:,} edges, label rate "
               f"{summary['label_rate']:.4f}, Bayes AUC {summary['bayes_auc']:.4f} ({summary['model']} model) -> {out}")
