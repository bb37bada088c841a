"""``gmp data synth``: generate a synthetic CTR dataset (see gmp.datasets.synth).

``cli/data.py`` calls :func:`register` with its ``data`` typer group.
"""

from __future__ import annotations

import typer

from cli._common import check_seed, echo_json, handle_errors, refuse_flags
from cli._options import DEFAULT_PRESET, DEFAULT_SCALE, options  # --continue refuses other values than these


def register(data_app: typer.Typer) -> None:
    """Add the ``synth`` command to the ``data`` group."""
    data_app.command("synth")(synth)


@options("data synth")
@handle_errors
def synth(out, preset, like, samples, scale, seed, skew, tail, communities, locality, local_threshold, entity_skew,
          fidelity, coherence, fresh, min_count, test_fraction, chunk_samples, overwrite, continue_from, growth,
          drift, as_json) -> None:
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
