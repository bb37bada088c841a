"""The next day of a synthetic dataset: ``gmp data synth --continue PREVIOUS -o NEXT``.

A day extends the previous one as ``gmp data import --extend`` does (:mod:`gmp.datasets.extend`):
every value keeps its id, new values get ids after the previous ``num_embeddings``, field by
field, and the header records ``parent`` and ``new_id_ranges`` (:mod:`gmp.datasets.format`).

**The story.** The generator of the first day (``gmp data synth``, its ``SynthConfig`` C0 in
``dataset.json`` under ``synth``) is the *universe* of day 0. Day d's universe C_d is C0 with
every field grown by ``growth`` per day (``n_d = n_0 + floor(n_0 ((1 + growth)^d - 1))``: fields
under ``1 / growth`` values never grow), same seed. A value is identified across universes by
its field and its popularity rank (the generator maps ranks to value ids by a permutation
that depends on the field's size; community slices and id-like entity attributes are defined
on ranks, so rank r of C_d is rank r of C0): ranks below n_0 are day 0's values with day 0's
ids, higher ranks are values that appear later; their ids are given the day they are first
used, field by field in rank order (most popular first), and kept in ``synth_ids.npz``.

Samples of day d are drawn from C_d's counter-based stream from where day d-1 stopped
(``synth_continue.next_index``), each accepted with probability ``w_d[c] / max w_d`` for its
community c: the communities' log-weights start at 0 on day 0 and take a seeded
``N(0, drift)`` random-walk step per day (clipped to +-1.5), so popularity and community
mixes drift; the uniforms are keyed by ``(seed, day, index // 65536)``, so the data does not
depend on how it is chunked. Labels and dense features are the generator's for the sample
(the hidden per-value weights are hashed from the universe's value id: they drift too).

Files beside the prepared dataset: ``synth_ids.npz`` (``field_<f>``: int64 dataset id of every
rank of C_d, -1 where the value has not appeared yet), ``synth_community.npy`` (each sample's
community), ``synth_index.npy`` (its index in the generator's stream). ``dataset.json`` holds
``synth_continue``: ``{"day", "root" (C0 as JSON), "growth", "drift", "seed", "cardinalities"
(C_d's), "log_weights", "first_index", "next_index"}``.
"""

from __future__ import annotations

import math
import os
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

from .._io import check_output_dir, release_claim_on_error
from ..errors import DatasetError
from ..seeds import check_seed
from .extend import parent_link
from .format import DATASET_FILES, FORMAT, FieldInfo, DatasetWriter, load_dataset
from .synth import SynthConfig, SyntheticCTR, config_of, fields_of

IDS_FILE = "synth_ids.npz"
#: generator indices sharing one acceptance stream (the data does not depend on chunking)
_BLOCK = 1 << 16
MAX_LOG_WEIGHT = 1.5


def _root_and_day(prev) -> tuple[SynthConfig, int, dict[str, Any]]:
    cont = prev.meta.get("synth_continue")
    if isinstance(cont, dict):
        root = SynthConfig(**_config_args(cont["root"]))
        return root, int(cont["day"]), cont
    if "synth" not in prev.meta:
        raise DatasetError(f"`continue_from` {prev.path}: it was not made by 'gmp data synth' (no 'synth' in its "
                           f"dataset.json); imported data extends with 'gmp data import --extend'.")
    if prev.meta["synth"].get("min_count", 1) > 1:
        raise DatasetError(f"`continue_from` {prev.path}: it was cut with `min_count` (its ids are renumbered, so "
                           f"the next day cannot keep them); continue a day generated without `min_count`.")
    root = config_of(prev)
    return root, 0, {"log_weights": [0.0] * root.num_communities, "next_index": int(prev.num_samples),
                     "cardinalities": list(root.cardinalities)}


def _config_args(obj: dict[str, Any]) -> dict[str, Any]:
    """``SynthConfig`` keyword arguments from its JSON (``SynthConfig.to_json``)."""
    names = list(obj["field_names"])
    keep = set(SynthConfig.__dataclass_fields__)  # type: ignore[attr-defined]
    d = {k: v for k, v in obj.items() if k in keep}
    d["cardinalities"] = tuple(d["cardinalities"])
    d["field_names"] = tuple(names)
    d["local_fields"] = tuple(nm in set(obj["local_fields"]) for nm in names)
    for k in ("entity_counts", "field_entity", "field_skews"):
        if isinstance(d.get(k), list):
            d[k] = tuple(d[k])
    for k in ("fidelity", "session_share"):
        if isinstance(d.get(k), list):
            d[k] = tuple(d[k])
    return d


def grown(root: SynthConfig, day: int, growth: float, num_samples: int, *, at_least=None) -> SynthConfig:
    """C_d: every field of ``root`` grown by ``growth`` per day (module docstring), never below
    ``at_least`` (the previous day's sizes: a value once possible stays possible)."""
    factor = (1.0 + growth) ** day - 1.0
    cards = [int(n) + int(math.floor(int(n) * factor)) for n in root.cardinalities]
    if at_least is not None:
        cards = [max(c, int(m)) for c, m in zip(cards, at_least)]
    cards = tuple(cards)
    return replace(root, cardinalities=cards, num_samples=num_samples)


def _rank_maps(prev, root: SynthConfig, prev_cards: list[int], cards: tuple[int, ...]) -> list[np.ndarray]:
    """Per field: dataset id of every rank of C_d (-1: not seen yet), from the previous day."""
    if (Path(prev.path) / IDS_FILE).is_file():
        with np.load(Path(prev.path) / IDS_FILE, allow_pickle=False) as z:
            old = [np.asarray(z[f"field_{f}"], dtype=np.int64) for f in range(len(cards))]
    else:  # the first day: rank r of field f is value perm[a + r] of C0, id a + perm[a + r]
        perm = SyntheticCTR(root, calibrate=False).perm
        old = [a + perm[a:a + n].astype(np.int64) for a, n in zip(root.offsets, root.cardinalities)]
    out = []
    for f, n in enumerate(cards):
        m = np.full(n, -1, dtype=np.int64)
        m[:min(n, prev_cards[f])] = old[f][:n]
        out.append(m)
    return out


def _draw(gen: SyntheticCTR, start: int, num_samples: int, weights: np.ndarray, seed: int, day: int):
    """Accepted samples from index ``start`` on: (indices, ranks [n, F], dense, labels, ctr, community)."""
    cfg = gen.config
    accept_p = weights / weights.max()
    inv = []
    for f, (a, n) in enumerate(zip(gen.offset, cfg.cardinalities)):
        r = np.empty(n, dtype=np.int64)
        r[gen.perm[a:a + n]] = np.arange(n)
        inv.append(r)
    parts: list[Any] = []
    got, i = 0, int(start)
    while got < num_samples:
        block = i // _BLOCK
        stop = (block + 1) * _BLOCK
        ch = gen.generate(i, stop)
        u = np.random.default_rng([int(seed), 7, int(day), int(block)]).random(_BLOCK)[i - block * _BLOCK:]
        keep = np.flatnonzero(u < accept_p[ch.community])[:num_samples - got]
        local = ch.ids[keep].astype(np.int64) - np.asarray(gen.offset, dtype=np.int64)[None, :]
        ranks = np.stack([inv[f][local[:, f]] for f in range(cfg.num_fields)], axis=1)
        parts.append((i + keep, ranks, ch.dense[keep], ch.labels[keep], ch.ctr[keep], ch.community[keep]))
        got += keep.size
        i = stop
    cols = list(zip(*parts))
    return tuple(np.concatenate(c) for c in cols) + (i,)


# long function: one pass from the previous header to the written next day
@release_claim_on_error("out")
def continue_synth(previous: str | os.PathLike, out: str | os.PathLike, *, num_samples: int | None = None,
                   growth: float = 0.02, drift: float = 0.5, seed: int | None = None,
                   test_fraction: float | None = None, overwrite: bool = False) -> dict[str, Any]:
    """Write the day after the synthetic dataset ``previous`` to ``out``; returns its header.

    ``num_samples`` defaults to the previous day's, ``seed`` (of the drift and the acceptance
    draws) to the first day's generator seed.

    Raises
    ------
    DatasetError
        ``previous`` is not synthetic, or a knob is out of range.
    """
    if not (math.isfinite(growth) and growth >= 0):
        raise DatasetError(f"The 'growth' parameter must be a finite number >= 0, got {growth}.")
    if not (math.isfinite(drift) and drift >= 0):
        raise DatasetError(f"The 'drift' parameter must be a finite number >= 0, got {drift}.")
    if seed is not None:
        check_seed(seed)
    check_output_dir(out, kind=FORMAT, overwrite=overwrite, inputs=[previous], own=DATASET_FILES)  # never over the day it continues
    prev = load_dataset(previous, verify=False)
    root, prev_day, cont = _root_and_day(prev)
    day = prev_day + 1
    n = int(prev.num_samples if num_samples is None else num_samples)
    if n < 1:
        raise DatasetError(f"The 'num_samples' parameter must be an int >= 1, got {n}.")
    seed = int(cont.get("seed", root.seed) if seed is None else seed)
    tf = float(root.test_fraction if test_fraction is None else test_fraction)
    cfg = grown(root, day, growth, n, at_least=cont["cardinalities"])
    steps = np.random.default_rng([seed, 11, day]).normal(0.0, drift, size=root.num_communities)
    log_w = np.clip(np.asarray(cont["log_weights"], dtype=np.float64) + steps, -MAX_LOG_WEIGHT, MAX_LOG_WEIGHT)
    gen = SyntheticCTR(cfg)
    idx, ranks, dense, labels, ctr, comm, next_index = _draw(gen, int(cont["next_index"]), n, np.exp(log_w), seed,
                                                           day)
    maps = _rank_maps(prev, root, list(cont["cardinalities"]), cfg.cardinalities)
    cursor, new_ranges, fields, ids = prev.num_embeddings, [], [], np.empty(ranks.shape, dtype=np.int64)
    old_fields = prev.categorical_fields
    for f in range(cfg.num_fields):
        unseen = np.unique(ranks[:, f][maps[f][ranks[:, f]] < 0])  # ascending rank: most popular first
        if unseen.size:
            maps[f][unseen] = cursor + np.arange(unseen.size)
            new_ranges.append([cursor, cursor + int(unseen.size)])
            cursor += int(unseen.size)
        ids[:, f] = maps[f][ranks[:, f]]
        of = old_fields[f]
        rng_f = tuple(tuple(r) for r in of.id_ranges) + (((new_ranges[-1][0], new_ranges[-1][1]),) if unseen.size
                                                          else ())
        fields.append(FieldInfo(of.name, of.kind, sum(b - a for a, b in rng_f), of.offset, missing_id=of.missing_id,
                                rare_id=of.rare_id, ranges=rng_f))
    dense_fields = [f for f in fields_of(cfg) if f.kind == "dense"]
    header = {"day": day, "root": root.to_json(), "growth": float(growth), "drift": float(drift), "seed": seed,
              "cardinalities": list(cfg.cardinalities), "log_weights": [float(x) for x in log_w],
              "first_index": int(cont["next_index"]), "next_index": int(next_index), "num_new_ids":
              int(cursor - prev.num_embeddings)}
    with DatasetWriter(out, num_dense=cfg.num_dense, overwrite=overwrite, inputs=[previous]) as w:
        w.add(np.full(n, cfg.num_fields, dtype=np.int32), np.sort(ids, axis=1).reshape(-1), labels, dense)
        np.savez(w.tmpdir / IDS_FILE, **{f"field_{f}": m for f, m in enumerate(maps)})
        np.save(w.tmpdir / "synth_community.npy", comm.astype(np.int32))
        np.save(w.tmpdir / "synth_index.npy", idx.astype(np.int64))
        np.save(w.tmpdir / "synth_ctr.npy", ctr.astype(np.float32))
        return w.finish(fields=dense_fields + fields, num_embeddings=cursor,
                        source={"format": "synth-continue", "inputs": [str(previous)],
                                "options": {"growth": growth, "drift": drift, "seed": seed}},
                        test_fraction=tf, dedupe=False,
                        extra={"parent": parent_link(prev.meta, previous),
                               "new_id_ranges": new_ranges, "synth_continue": header})
