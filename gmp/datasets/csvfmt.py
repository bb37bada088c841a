"""Importer for generic delimited text (CSV/TSV) with a header line.

The first line of every input names the columns (all inputs must share it).
You say which column is the label and how to read the others::

    age,workclass,education,hours,genres,income
    39,State-gov,Bachelors,40,a|b,<=50K

    gmp data import csv adult.csv --out adult --label income --label-positive '>50K' \\
        --dense age,hours --multi genres --multi-sep '|'

* ``--label COL`` — numeric (label = 1 when value >= ``--label-threshold``,
  default 0.5, so 0/1 and -1/+1 both work) or, with ``--label-positive V``,
  label = 1 exactly when the cell equals ``V``.
* ``--cat COLS`` — categorical columns (comma-separated names). Default: every
  column not named as label, dense, multi-valued or ``--ignore``.
* ``--multi COLS`` with ``--multi-sep S`` (default ``|``) — multi-valued
  columns: ``a|b|c`` gives three ids of one field; an empty cell is the
  field's missing id.
* ``--dense COLS`` — numeric columns stored in ``dense.npy``; transformed by
  ``--dense-transform log1p`` (default: ``log(1 + max(x, 0))``, negatives
  clamp to 0) or ``none``; an empty cell is 0.
* ``--sep`` — the delimiter (default: recognised from the first lines — the
  one of tab, comma, semicolon, pipe and space that splits every line into the
  same number of columns, the most columns winning). A pair of double quotes around a cell is stripped; quoted
  cells containing the delimiter are not supported.

Malformed lines: a column count different from the header's, an empty or
non-numeric label, a non-numeric dense value.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from ..errors import ImportDataError
from ..progress import task
from .format import DatasetWriter
from .streaming import (BAD, BadLines, CommonOptions, cell_text, check_inputs, finish_import, hash_strings,
                        hash_token_block, iter_chunks, log1p_clamped, open_quotes, parse_float_block, read_header,
                        split_multi, token, tokenize, total_size)
from .vocab import Vocabulary

log = logging.getLogger(__name__)


@dataclass
class CsvOptions:
    """Column roles of a generic CSV/TSV import (see the module docstring)."""

    label: str = ""
    categorical: list[str] | None = None
    multi: list[str] = field(default_factory=list)
    dense: list[str] = field(default_factory=list)
    ignore: list[str] = field(default_factory=list)
    sep: str | None = None
    multi_sep: str = "|"
    label_positive: str | None = None
    label_threshold: float = 0.5
    dense_transform: str = "log1p"

    def __post_init__(self) -> None:
        if not self.label:
            raise ImportDataError("csv import needs `label` COLUMN (the name of the label column in the header).")
        if self.sep is not None and len(self.sep.encode()) != 1:
            raise ImportDataError(f"`sep` must be a single character, got {self.sep!r}.")
        if len(self.multi_sep.encode()) != 1:
            raise ImportDataError(f"`multi_sep` must be a single character, got {self.multi_sep!r}.")
        if not np.isfinite(self.label_threshold):
            raise ImportDataError(f"`label_threshold` must be a finite number, got {self.label_threshold}.")
        if self.dense_transform not in ("log1p", "none"):
            raise ImportDataError(f"`dense_transform` must be 'log1p' or 'none', got {self.dense_transform!r}.")
        # an ignored column given another role too: which one was meant cannot be told (it was imported)
        for role, names in (("label", [self.label]), ("categorical", self.categorical or []), ("multi", self.multi),
                            ("dense", self.dense)):
            both = [c for c in names if c in self.ignore]
            if both:
                raise ImportDataError(f"column {both[0]!r} is named in both `ignore` and `{role}`; give each column "
                                      f"one role.")

    @property
    def positive_value(self) -> str | None:
        """``label_positive`` as a label cell is read (:func:`~gmp.datasets.streaming.cell_text`)."""
        return None if self.label_positive is None else cell_text(self.label_positive)

    def to_json(self) -> dict[str, Any]:
        return {"label": self.label, "categorical": self.categorical, "multi": self.multi, "dense": self.dense,
                "ignore": self.ignore, "sep": self.sep, "multi_sep": self.multi_sep,
                "label_positive": self.label_positive, "label_threshold": self.label_threshold,
                "dense_transform": self.dense_transform}


def default_sep(path: Path) -> str:
    """The delimiter recognised from the first lines (:func:`gmp.datasets.sniff.delimiter_of`)."""
    from .sniff import delimiter_of

    return delimiter_of(path)


def read_columns(paths: Sequence[Path], sep: str, what: str) -> list[str]:
    """The header of the first input; every other input must have the same one."""
    header = read_header(paths[0])
    if not header.strip():
        raise ImportDataError(f"{paths[0]}: the input is empty (no header line); {what} needs a header line.")
    try:
        cols = [c.strip().strip('"') for c in header.decode("utf-8").split(sep)]
    except UnicodeDecodeError:
        raise ImportDataError(f"{paths[0]}: the header line is not UTF-8 text; is this a {what} file?") from None
    named = [c for c in cols if c]  # unnamed columns (a trailing separator) are not imported: import_csv
    if len(set(named)) != len(named):
        dup = sorted({c for c in named if named.count(c) > 1})
        raise ImportDataError(f"{paths[0]}: the header names column(s) {dup} more than once.")
    for p in paths[1:]:
        h = read_header(p).decode("utf-8", errors="replace")
        if [c.strip().strip('"') for c in h.split(sep)] != cols:
            raise ImportDataError(f"{p}: its header differs from {paths[0]}'s; all inputs must have the same columns.")
    return cols


def _resolve(names: Sequence[str], cols: list[str], flag: str, path: Path) -> list[int]:
    out = []
    for n in names:
        if n not in cols:
            raise ImportDataError(f"{flag} names column {n!r}, which is not in the header of {path} ({cols}).")
        out.append(cols.index(n))
    return out


def import_csv(inputs: Sequence[str | os.PathLike], out: str | os.PathLike, *, options: CsvOptions,
               common: CommonOptions | None = None) -> dict[str, Any]:
    """Import delimited text with a header into a prepared dataset at ``out``."""
    common = common or CommonOptions()
    paths = check_inputs(inputs, fmt="csv")
    sep = options.sep or default_sep(paths[0])
    cols = read_columns(paths, sep, "csv")
    label_col = _resolve([options.label], cols, "`label`", paths[0])[0]
    dense_cols = _resolve(options.dense, cols, "`dense`", paths[0])
    multi_cols = _resolve(options.multi, cols, "`multi`", paths[0])
    ignore_cols = _resolve(options.ignore, cols, "`ignore`", paths[0])
    unnamed = [i for i, c in enumerate(cols) if not c]
    if unnamed:  # no flag can name them: a trailing separator on every line, most often
        log.warning("warning: column(s) %s of %s's header have no name (a separator at the end of the line?) and are "
                    "not imported; name them in the header to import them", ", ".join(str(i + 1) for i in unnamed),
                    paths[0])
    if options.categorical is None:
        taken = {label_col, *dense_cols, *multi_cols, *ignore_cols, *unnamed}
        cat_cols = [i for i in range(len(cols)) if i not in taken]
    else:
        cat_cols = _resolve(options.categorical, cols, "`categorical`", paths[0])
    roles = [label_col] + dense_cols + multi_cols + cat_cols
    if len(set(roles)) != len(roles):
        raise ImportDataError("a column is named in more than one of `label`/`categorical`/`multi`/`dense`; give each one role.")
    if not (cat_cols or multi_cols):
        raise ImportDataError("no categorical or multi-valued columns to import; name some with `categorical` or `multi`.")
    layout = DelimitedLayout(cols, sep, label_col, dense_cols, multi_cols, cat_cols, options)
    return run_delimited(paths, out, fmt="csv", layout=layout, common=common, format_options=options.to_json())


@dataclass
class DelimitedLayout:
    cols: list[str]
    sep: str
    label_col: int
    dense_cols: list[int]
    multi_cols: list[int]
    cat_cols: list[int]
    options: CsvOptions


def run_delimited(paths: list[Path], out, *, fmt: str, layout: DelimitedLayout, common: CommonOptions,
                  format_options: dict[str, Any], derived=None) -> dict[str, Any]:
    """The chunk loop shared by the CSV-like importers.

    ``derived`` (optional) is an object with ``names`` (extra categorical
    fields) and ``__call__(buf, starts, ends) -> (keys [n, k] uint64, present
    [n, k] bool, bad [n] bool, reason(i) -> str)`` for fields computed from
    columns (Avazu's hour split).
    """
    vocab = Vocabulary(min_count=common.min_count, hash_sizes=common.hash_sizes)
    cat_fids = [vocab.add_field(layout.cols[c]) for c in layout.cat_cols]
    der_fids = [vocab.add_field(n) for n in derived.names] if derived is not None else []
    multi_fids = [vocab.add_field(layout.cols[c], "multi") for c in layout.multi_cols]
    vocab.check_hash_fields()
    bad = BadLines(common.max_bad_lines)
    opts = layout.options
    positive = opts.positive_value
    positive_key = hash_strings([positive])[0] if positive is not None else None
    ncols_expected = len(layout.cols)
    sepname = {",": "comma", "\t": "tab", ";": "semicolon", "|": "pipe", " ": "space"}.get(layout.sep, repr(layout.sep))
    lines_read = positives = 0
    num_dense = len(layout.dense_cols)
    # stored as float32: without a transform a value must fit float32 (1e300 would become inf)
    raw = layout.options.dense_transform == "none"
    dense_limit = float(np.finfo(np.float32).max) if raw else np.inf
    limit_note = " within float32 (--dense-transform none)" if raw else ""
    with DatasetWriter(out, num_dense=num_dense, overwrite=common.overwrite, inputs=paths) as writer, \
            task(f"Importing {fmt}", total=total_size(paths), unit="B") as advance:
        for path in paths:
            common.begin_input(writer, path)
            last = 0
            inside = False  # inside a quoted cell an earlier line opened (open_quotes)
            for chunk in iter_chunks(path, chunk_bytes=common.chunk_bytes, skip_lines=1):
                bad.skip_blank(chunk)
                buf, starts, ends, ncols = tokenize(chunk.data, layout.sep, ncols_expected)
                n = ncols.size
                lines_read += n
                quoted, inside = open_quotes(buf, starts, ends, ncols, inside)
                lab_s, lab_e = starts[:, [layout.label_col]], ends[:, [layout.label_col]]
                if positive_key is not None:
                    lkeys, lstat = hash_token_block(buf, lab_s, lab_e, True, True)
                    labels = (lkeys[:, 0] == positive_key).astype(np.float32)
                    bad_label = lstat[:, 0] != 0
                else:
                    lvals, lstat = parse_float_block(buf, lab_s, lab_e)
                    labels = (lvals[:, 0] >= opts.label_threshold).astype(np.float32)
                    bad_label = (lstat[:, 0] != 0) | ~np.isfinite(lvals[:, 0])
                dvals, dstat = parse_float_block(buf, starts[:, layout.dense_cols], ends[:, layout.dense_cols])
                bad_cols = ncols != ncols_expected
                # non-finite input (1e400 parses as inf), or beyond float32 when stored as is
                not_finite = (dstat == 0) & ~(np.isfinite(dvals) & (np.abs(dvals) <= dense_limit))
                bad_dense = ((dstat == BAD) | not_finite).any(axis=1)
                if derived is not None:
                    dkeys, dpresent, bad_derived, dreason = derived(buf, starts, ends)
                else:
                    bad_derived = np.zeros(n, dtype=bool)
                is_bad = bad_cols | bad_label | bad_dense | bad_derived | (quoted != 0)
                if is_bad.any():
                    rows = np.flatnonzero(is_bad)

                    def reason(k: int) -> str:
                        i = rows[k]
                        if quoted[i] < 0:
                            return ("goes on with a quoted cell an earlier line opened (a newline inside quotes is "
                                    "not supported)")
                        if quoted[i] > 0:
                            return (f"column {int(quoted[i])} opens a double quote it does not close (a quoted cell "
                                    f"holding the separator or a newline is not supported)")
                        if bad_cols[i]:
                            return f"expected {ncols_expected} {sepname}-separated columns, got {int(ncols[i])}"
                        c = layout.label_col
                        if bad_label[i]:
                            if lstat[i, 0] == 1:
                                return f"label column {layout.cols[c]!r} is empty"
                            what = "a number" if lstat[i, 0] == BAD else "a finite number"
                            return (f"label column {layout.cols[c]!r} is not {what}: "
                                    f"{token(buf, starts[i, c], ends[i, c])}")
                        if bad_dense[i]:
                            j = int(np.flatnonzero((dstat[i] == BAD) | not_finite[i])[0])
                            c = layout.dense_cols[j]
                            what = "a number" if dstat[i, j] == BAD else f"a finite number{limit_note}"
                            return (f"column {c + 1} ({layout.cols[c]}) is not {what}: "
                                    f"{token(buf, starts[i, c], ends[i, c])}")
                        return dreason(i)

                    bad.add_many(chunk.file, chunk.line_of(rows), reason)
                    bad.check(name=", ".join(map(str, paths)), lines_read=lines_read)
                good = np.flatnonzero(~is_bad)
                m = good.size
                advance(chunk.progress - last)
                last = chunk.progress
                if m == 0:
                    continue
                parts = []  # per field: (lengths [m], pids)
                cat = layout.cat_cols
                ckeys, cstat = hash_token_block(buf, starts[good][:, cat], ends[good][:, cat], True)
                for j, f in enumerate(cat_fids):
                    parts.append((None, vocab.lookup(f, ckeys[:, j], cstat[:, j] == 0)))
                for j, f in enumerate(der_fids):
                    parts.append((None, vocab.lookup(f, dkeys[good, j], dpresent[good, j])))
                for j, f in enumerate(multi_fids):
                    c = layout.multi_cols[j]
                    lens, keys = split_multi(buf, np.ascontiguousarray(starts[good, c]),
                                             np.ascontiguousarray(ends[good, c]), ord(opts.multi_sep), True)
                    # an empty list is the field's missing value (one id)
                    parts.append(vocab.lookup_multi(f, lens, keys))
                lengths, ids = interleave(parts, m)
                dense = None
                if num_dense:
                    dv = dvals[good]
                    dense = log1p_clamped(dv) if opts.dense_transform == "log1p" else dv.astype(np.float32)
                writer.add(lengths, ids, labels[good], dense)
                positives += int(labels[good].sum())
        if positive is not None and positives == 0:
            log.warning("warning: --label-positive %r matched no row's label, so every label is 0; compare it with "
                        "the label column's values (spaces and a pair of quotes around a cell are ignored).",
                        positive)
        return finish_import(writer, vocab, bad, fmt=fmt, paths=paths, lines_read=lines_read, common=common,
                             format_options=format_options, dense_names=[layout.cols[c] for c in layout.dense_cols])


def interleave(parts: list[tuple[np.ndarray | None, np.ndarray]], m: int) -> tuple[np.ndarray, np.ndarray]:
    """Sample-major id stream from per-field pieces (``None`` lengths = one id per sample)."""
    lens = np.stack([np.ones(m, np.int64) if l is None else l for l, _ in parts], axis=1)  # [m, F]
    lengths = lens.sum(axis=1)
    if all(l is None for l, _ in parts):
        return lengths.astype(np.int32), np.stack([p for _, p in parts], axis=1).reshape(-1)
    total = int(lengths.sum())
    ids = np.empty(total, dtype=np.int64)
    # position of field f's first id within sample i = sample start + sum of earlier fields' lengths
    sample_start = np.concatenate([[0], np.cumsum(lengths)[:-1]])
    field_start = sample_start[:, None] + np.concatenate([np.zeros((m, 1), np.int64), np.cumsum(lens, axis=1)[:, :-1]], axis=1)
    for f, (l, p) in enumerate(parts):
        if l is None:
            ids[field_start[:, f]] = p
        else:
            # within-field offset of each id
            first = np.repeat(field_start[:, f], l)
            within = np.arange(p.size) - np.repeat(np.concatenate([[0], np.cumsum(l)[:-1]]), l)
            ids[first + within] = p
    return lengths.astype(np.int32), ids
