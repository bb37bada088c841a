"""Importer for Parquet files (and anything else pyarrow reads as Parquet), column roles as for csv.

    gmp data import parquet train.parquet --out data/x --label click --dense I1..I13 [--test-input test.parquet]

Columns are named as for ``csv`` (``--label``, ``--cat``, ``--multi``, ``--dense``,
``--ignore``, ``--label-positive``, ``--label-threshold``, ``--dense-transform``);
there is no delimiter. The file is read in record batches (``--chunk-mb`` worth of
rows at a time), so memory does not grow with the file.

How a cell becomes a vocabulary key (per field, so equal keys in two fields are two
different ids):

* integer and boolean columns: the value itself;
* strings, binaries, dictionary columns: a 64-bit hash of the text (the same hash
  the csv importer uses for a token), computed once per distinct value of a batch;
* any other type (floats, dates, ...): the hash of its text form;
* null: the field's missing id.

Multi-valued columns are Arrow lists (each element one id of the field) or strings
split on ``--multi-sep``; an empty or null list is the field's missing id.

Malformed rows (counted against ``--max-bad-lines``, numbered from 1 in file order):
a null or non-numeric label, a dense value that is not a finite number. Reading
needs ``pyarrow`` (``pip install pyarrow``, or the ``parquet`` extra).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from ..errors import ImportDataError
from ..progress import task
from .csvfmt import CsvOptions, interleave
from .format import DatasetWriter
from .streaming import BadLines, CommonOptions, check_inputs, finish_import, hash_strings, log1p_clamped, total_size
from .vocab import Vocabulary

#: bytes of input per record batch are not known before reading; rows per batch instead
ROWS_PER_BATCH = 1 << 16


def _pyarrow():
    try:
        import pyarrow as pa
        import pyarrow.compute as pc
        import pyarrow.parquet as pq
    except ImportError:
        raise ImportDataError("reading parquet needs pyarrow: pip install pyarrow (or pip install 'gmp[parquet]').") \
            from None
    return pa, pc, pq


def import_parquet(inputs: Sequence[str | os.PathLike], out: str | os.PathLike, *, options: CsvOptions,
                   common: CommonOptions | None = None) -> dict[str, Any]:
    """Import Parquet file(s) into a prepared dataset at ``out``; returns its header."""
    pa, pc, pq = _pyarrow()
    common = common or CommonOptions()
    paths = check_inputs(inputs)
    files = [_open(pq, p) for p in paths]
    cols = list(files[0].schema_arrow.names)
    for p, f in zip(paths[1:], files[1:]):
        if list(f.schema_arrow.names) != cols:
            raise ImportDataError(f"{p}: its columns differ from {paths[0]}'s; all inputs must have the same columns.")
    roles = _roles(options, cols, paths[0])
    _check_nested(pa, files[0].schema_arrow, roles, paths[0])
    vocab = Vocabulary(min_count=common.min_count, hash_sizes=common.hash_sizes)
    cat_fids = [vocab.add_field(c) for c in roles["cat"]]
    multi_fids = [vocab.add_field(c, "multi") for c in roles["multi"]]
    vocab.check_hash_fields()
    bad = BadLines(common.max_bad_lines)
    rows_read = 0
    wanted = [roles["label"], *roles["dense"], *roles["cat"], *roles["multi"]]
    with DatasetWriter(out, num_dense=len(roles["dense"]), overwrite=common.overwrite, inputs=paths) as writer, \
            task("Importing parquet", total=total_size(paths), unit="B") as advance:
        for path, pf in zip(paths, files):
            common.begin_input(writer, path)
            size, done, first_row = path.stat().st_size, 0, 1
            for batch in _batches(pf, path, wanted):
                n = batch.num_rows
                labels, bad_label = _labels(pa, pc, batch.column(roles["label"]), options)
                dense, bad_dense = _dense(pa, pc, [batch.column(c) for c in roles["dense"]], n)
                is_bad = bad_label | bad_dense
                rows_read += n
                if is_bad.any():
                    rows = np.flatnonzero(is_bad)

                    def reason(k: int) -> str:
                        i = rows[k]
                        if bad_label[i]:
                            return f"label column {roles['label']!r} is null or not a number"
                        j = int(np.flatnonzero(~np.isfinite(dense[i]))[0])
                        return f"column {roles['dense'][j]!r} is null, not a number or not finite"

                    bad.add_many(str(path), first_row + rows, reason)
                    bad.check(name=", ".join(map(str, paths)), lines_read=rows_read)
                good = ~is_bad
                first_row += n
                m = int(good.sum())
                done_now = int(size * min(1.0, first_row / max(1, pf.metadata.num_rows)))
                advance(done_now - done)
                done = done_now
                if m == 0:
                    continue
                batch = batch.filter(pa.array(good))
                parts = []
                for c, f in zip(roles["cat"], cat_fids):
                    keys, present = _keys(pa, pc, batch.column(c))
                    parts.append((None, vocab.lookup(f, keys, present)))
                for c, f in zip(roles["multi"], multi_fids):
                    lens, keys = _multi_keys(pa, pc, batch.column(c), options.multi_sep)
                    parts.append(vocab.lookup_multi(f, lens, keys))
                lengths, ids = interleave(parts, m)
                d = None
                if roles["dense"]:
                    d = dense[good]
                    d = log1p_clamped(d) if options.dense_transform == "log1p" else d.astype(np.float32)
                writer.add(lengths, ids, labels[good], d)
        return finish_import(writer, vocab, bad, fmt="parquet", paths=paths, lines_read=rows_read, common=common,
                             format_options=options.to_json(), dense_names=roles["dense"])


def check_readable(path: str | os.PathLike) -> None:
    """Raise the importer's own one-line error for a file it could not read: pyarrow missing, a file that
    is not Parquet, truncated or corrupt (checked before its columns are chosen, so that a column's
    question never hides it)."""
    _, _, pq = _pyarrow()
    path = Path(path)
    next(_batches(_open(pq, path), path, None), None)


def _open(pq, path: Path):
    try:
        return pq.ParquetFile(path)
    except Exception as exc:  # pyarrow raises ArrowInvalid / OSError subclasses
        raise ImportDataError(f"{path}: not a readable Parquet file ({str(exc).splitlines()[0]}); "
                              f"is it a csv/tsv file? see 'gmp data import --help'.") from None


def _batches(pf, path: Path, columns: list[str]):
    try:
        yield from pf.iter_batches(batch_size=ROWS_PER_BATCH, columns=columns)
    except ImportDataError:
        raise
    except Exception as exc:
        raise ImportDataError(f"{path}: corrupt Parquet data ({str(exc).splitlines()[0]}); re-create the file.") \
            from None


def _roles(options: CsvOptions, cols: list[str], path: Path) -> dict[str, Any]:
    def check(names, flag):
        for n in names:
            if n not in cols:
                raise ImportDataError(f"{flag} names column {n!r}, which is not in {path} ({cols}).")
        return list(names)

    label = check([options.label], "`label`")[0]
    dense, multi, ignore = check(options.dense, "`dense`"), check(options.multi, "`multi`"), \
        check(options.ignore, "`ignore`")
    if options.categorical is None:
        taken = {label, *dense, *multi, *ignore}
        cat = [c for c in cols if c not in taken]
    else:
        cat = check(options.categorical, "`categorical`")
    named = [label, *dense, *multi, *cat]
    if len(set(named)) != len(named):
        raise ImportDataError("a column is named in more than one of `label`/`categorical`/`multi`/`dense`; give each one role.")
    if not (cat or multi):
        raise ImportDataError("no categorical or multi-valued columns to import; name some with `categorical` or `multi`.")
    return {"label": label, "dense": dense, "multi": multi, "cat": cat}


def _labels(pa, pc, col, options: CsvOptions) -> tuple[np.ndarray, np.ndarray]:
    n = len(col)
    positive = options.positive_value
    if positive is not None:
        try:  # a numeric column compares numerically ('1.0' is its 1), as its csv text would after parsing
            number = float(positive) if (pa.types.is_integer(col.type) or pa.types.is_floating(col.type)) else None
        except ValueError:
            number = None
        if number is not None:
            labels = np.asarray(pc.fill_null(pc.equal(pc.cast(col, pa.float64()), number), False), dtype=np.float32)
        else:
            text = pc.cast(col, pa.string())
            labels = np.asarray(pc.fill_null(pc.equal(text, positive), False), dtype=np.float32)
        return labels, np.asarray(pc.is_null(col))
    values = _as_float(pa, pc, col, n)
    bad = ~np.isfinite(values)
    labels = (np.nan_to_num(values, nan=-np.inf) >= options.label_threshold).astype(np.float32)
    return labels, bad


def _as_float(pa, pc, col, n: int) -> np.ndarray:
    """float64 values; null or unparsable -> nan."""
    t = col.type
    if pa.types.is_string(t) or pa.types.is_large_string(t):
        out = np.full(n, np.nan)
        text = col.to_pylist()
        for i, s in enumerate(text):
            try:
                out[i] = float(s)
            except (TypeError, ValueError):
                pass
        return out
    try:  # unsafe: a 64-bit integer beyond 2^53 is its nearest float (a safe cast refused it: every row "null")
        arr = pc.cast(col, pa.float64(), safe=not pa.types.is_integer(t))
    except Exception:
        return np.full(n, np.nan)
    return np.asarray(arr.to_numpy(zero_copy_only=False), dtype=np.float64)


def _dense(pa, pc, cols, n: int) -> tuple[np.ndarray, np.ndarray]:
    if not cols:
        return np.zeros((n, 0)), np.zeros(n, dtype=bool)
    out = np.stack([_as_float(pa, pc, c, n) for c in cols], axis=1)
    nulls = np.stack([np.asarray(c.is_null()) for c in cols], axis=1)
    out[nulls] = 0.0  # an empty cell is 0, as in csv
    return out, ~np.isfinite(out).all(axis=1)


def _keys(pa, pc, col) -> tuple[np.ndarray, np.ndarray]:
    """(uint64 keys, present) of a categorical column."""
    present = ~np.asarray(col.is_null())
    t = col.type
    if pa.types.is_dictionary(t):
        col = pc.cast(col, t.value_type)
        t = col.type
    if pa.types.is_uint64(t):  # the values are 64-bit keys as they are (a cast to int64 refused those >= 2^63)
        v = np.asarray(pc.fill_null(col, 0).to_numpy(zero_copy_only=False), dtype=np.uint64)
        return v, present
    if pa.types.is_integer(t) or pa.types.is_boolean(t):
        v = np.asarray(pc.fill_null(pc.cast(col, pa.int64()), 0).to_numpy(zero_copy_only=False), dtype=np.int64)
        return v.view(np.uint64), present
    if not (pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_binary(t)):
        col = pc.cast(col, pa.string())
    enc = pc.dictionary_encode(col)
    if hasattr(enc, "combine_chunks"):
        enc = enc.combine_chunks()
    values = enc.dictionary.to_pylist()
    uniq = hash_strings([b if isinstance(b, bytes) else str(b) for b in values])
    idx = np.asarray(pc.fill_null(enc.indices, 0).to_numpy(zero_copy_only=False), dtype=np.int64)
    keys = uniq[idx] if uniq.size else np.zeros(idx.size, dtype=np.uint64)
    empty = [i for i, v in enumerate(values) if v in ("", b"")]
    if empty:  # an empty string is the field's missing value, as an empty csv cell is
        present &= ~np.isin(idx, empty)
    return keys.astype(np.uint64), present


def _multi_keys(pa, pc, col, multi_sep: str) -> tuple[np.ndarray, np.ndarray]:
    """(ids per row, uint64 keys) of a multi-valued column (Arrow list, or text split on ``multi_sep``)."""
    t = col.type
    if pa.types.is_string(t) or pa.types.is_large_string(t):
        col = pc.split_pattern(pc.fill_null(col, ""), multi_sep)
        t = col.type
    if not (pa.types.is_list(t) or pa.types.is_large_list(t)):
        raise ImportDataError(f"a `multi` column must hold lists or text, got Arrow type {t}.")
    if hasattr(col, "combine_chunks"):
        col = col.combine_chunks()
    col = pc.fill_null(col, pa.scalar([], type=t))
    lens = np.asarray(pc.list_value_length(col).to_numpy(zero_copy_only=False), dtype=np.int64)
    flat = pc.list_flatten(col)
    if pa.types.is_string(flat.type) or pa.types.is_large_string(flat.type):
        keep = np.asarray(pc.not_equal(flat, ""), dtype=bool)  # "a||b" and "" hold no empty value
        if not keep.all():
            row = np.repeat(np.arange(lens.size), lens)
            flat = flat.filter(pa.array(keep))
            lens = np.bincount(row[keep], minlength=lens.size).astype(np.int64)
    keys, present = _keys(pa, pc, flat)
    if not present.all():  # null elements hold no value
        row = np.repeat(np.arange(lens.size), lens)
        lens = np.bincount(row[present], minlength=lens.size).astype(np.int64)
        keys = keys[present]
    return lens, keys


def _check_nested(pa, schema, roles: dict[str, Any], path: Path) -> None:
    """Refuse a nested column (struct, map, list of lists, ...) in a role that cannot read it, naming it
    (pyarrow's cast of one to text was a traceback). Lists of scalars are read as ``--multi`` only."""
    for role, flag in (("label", "`label`"), ("dense", "`dense`"), ("cat", "`categorical`"), ("multi", "`multi`")):
        for c in [roles[role]] if role == "label" else roles[role]:
            t = schema.field(c).type
            if pa.types.is_dictionary(t):
                t = t.value_type
            flat_list = (pa.types.is_list(t) or pa.types.is_large_list(t)) and not pa.types.is_nested(t.value_type)
            if not pa.types.is_nested(t) or (role == "multi" and flat_list):
                continue
            fix = ("choose a scalar label column" if role == "label"
                   else "name it with `multi` (each element one value), or `ignore` it" if flat_list and role == "cat"
                   else "flatten it into scalar columns first, or `ignore` it")
            raise ImportDataError(f"{path}: column {c!r} ({flag}) has the nested Arrow type {t}, which gmp cannot "
                                  f"read as a {'multi-valued' if role == 'multi' else 'scalar'} column; {fix}.")
