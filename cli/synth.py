"""``gmp data synth``: generate a synthetic CTR dataset (see gmp.datasets.synth).

``cli/data.py`` calls :func:`register` with its ``data`` typer group.
"""

from __future__ import annotations

import typer

from cli._common import check_seed, echo_json, handle_errors
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
    from gmp.api import run_synth
    from gmp.specs import resolve_synth
    from gmp.wording import plural

    from ._flags import flags_for_params

    with flags_for_params():
        spec = resolve_synth(
            out, preset=None if preset == DEFAULT_PRESET else preset, like=like, num_samples=samples,
            scale=None if scale == DEFAULT_SCALE else scale, seed=check_seed(seed), test_fraction=test_fraction,
            min_count=min_count, chunk_samples=chunk_samples, overwrite=overwrite, continue_from=continue_from,
            growth=growth, drift=drift, local_min_values=local_threshold, skew=skew, tail=tail,
            num_communities=communities, locality=locality, entity_skew=entity_skew, fidelity=fidelity,
            coherence=coherence, fresh=fresh)
        meta = run_synth(spec)
    if continue_from is not None:  # the next day (issue 18): ids of PREVIOUS stay, new ones are appended
        day = meta["synth_continue"]
        summary = {"out": str(out), "day": day["day"], "num_samples": meta["num_samples"],
                   "num_embeddings": meta["num_embeddings"], "num_new_ids": day["num_new_ids"],
                   "parent": meta["parent"]["sha256"], "sha256": meta["sha256"]}
        if as_json:
            echo_json(summary)
        else:
            typer.echo(f"generated day {day['day']} after {continue_from}: {meta['num_samples']:,} "
                       f"{plural('sample', meta['num_samples'])}, {day['num_new_ids']:,} new "
                       f"{plural('id', day['num_new_ids'])} ({meta['num_embeddings']:,} in all) -> {out}")
        return
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
    typer.echo(f"generated {summary['num_samples']:,} {plural('sample', summary['num_samples'])} "
               f"({meta['split']['num_test']:,} test), {summary['num_embeddings']:,} "
               f"{plural('embedding', summary['num_embeddings'])}, {summary['num_edges']:,} "
               f"{plural('edge', summary['num_edges'])}, label rate "
               f"{summary['label_rate']:.4f}, Bayes AUC {summary['bayes_auc']:.4f} ({summary['model']} model) -> {out}")
