"""Importer for Criteo Kaggle / Terabyte click logs (TSV, optionally gzip).

Each line has 40 tab-separated columns::

    label  I1 .. I13  C1 .. C26
    0\t1\t1\t5\t0\t1382\t4\t15\t2\t181\t1\t2\t\t2\t68fd1e64\t80e26c9b\t...\t

* ``label`` — ``0`` or ``1``.
* ``I1..I13`` — integer counts, possibly empty (missing). Stored in
  ``dense.npy`` as ``log(1 + max(x, 0))`` (float32): a few published values
  are negative (``I2`` has -1, -2, -3), they are clamped to 0 before the
  log; missing values become 0.
* ``C1..C26`` — 32-bit hexadecimal hashes (``68fd1e64``), possibly empty
  (missing -> the field's missing id). The hex value itself is the
  vocabulary key (1–16 hex digits accepted, either case).

Some published copies strip trailing empty columns, so rows with 37, 38 or
39 columns are padded with empty (missing) columns, not rejected. Anything
else is a malformed line: a column count outside 37..40, a label other than
0/1, a non-integer dense value, or a categorical value that is not
hexadecimal. Parsing is compiled (numba) over blocks of raw bytes.
"""

from __future__ import annotations

import os
from typing import Any, Sequence

import numpy as np

from ..progress import task
from .format import DatasetWriter
from .streaming import (BAD, BadLines, CommonOptions, check_inputs, finish_import, iter_chunks, log1p_clamped,
                        parse_hex_block, parse_int_block, token, tokenize, total_size)
from .vocab import Vocabulary

NUM_DENSE = 13
NUM_CAT = 26
NUM_COLS = 1 + NUM_DENSE + NUM_CAT
MIN_COLS = NUM_COLS - 3
DENSE_NAMES = [f"I{i}" for i in range(1, NUM_DENSE + 1)]
CAT_NAMES = [f"C{i}" for i in range(1, NUM_CAT + 1)]


def import_criteo(inputs: Sequence[str | os.PathLike], out: str | os.PathLike, *,
                  common: CommonOptions | None = None) -> dict[str, Any]:
    """Import Criteo TSV file(s) into a prepared dataset at ``out``; returns its header.

    Raises
    ------
    ImportDataError
        Unreadable/empty/truncated input, or more malformed lines than
        ``common.max_bad_lines``.
    """
    common = common or CommonOptions()
    paths = check_inputs(inputs, streams=True, fmt="criteo")
    vocab = Vocabulary(min_count=common.min_count, hash_sizes=common.hash_sizes)
    fids = [vocab.add_field(n) for n in CAT_NAMES]
    vocab.check_hash_fields()
    bad = BadLines(common.max_bad_lines)
    lines_read = 0
    with DatasetWriter(out, num_dense=NUM_DENSE, overwrite=common.overwrite, inputs=paths) as writer, \
            task("Importing criteo", total=total_size(paths), unit="B") as advance:
        for path in paths:
            common.begin_input(writer, path)
            last = 0
            for chunk in iter_chunks(path, chunk_bytes=common.chunk_bytes):
                bad.skip_blank(chunk)
                n = _import_chunk(chunk, writer, vocab, fids, bad)
                lines_read += n
                bad.check(name=", ".join(map(str, paths)), lines_read=lines_read)
                advance(chunk.progress - last)
                last = chunk.progress
        return finish_import(writer, vocab, bad, fmt="criteo", paths=paths, lines_read=lines_read,
                             common=common, format_options={}, dense_names=DENSE_NAMES)


def _import_chunk(chunk, writer: DatasetWriter, vocab: Vocabulary, fids: list[int], bad: BadLines) -> int:
    buf, starts, ends, ncols = tokenize(chunk.data, "\t", NUM_COLS)
    n = ncols.size
    ints, int_status = parse_int_block(buf, starts[:, : 1 + NUM_DENSE], ends[:, : 1 + NUM_DENSE])
    hexes, hex_status = parse_hex_block(buf, starts[:, 1 + NUM_DENSE :], ends[:, 1 + NUM_DENSE :])
    bad_cols = (ncols < MIN_COLS) | (ncols > NUM_COLS)
    bad_label = (int_status[:, 0] != 0) | ((ints[:, 0] != 0) & (ints[:, 0] != 1))
    bad_dense = (int_status[:, 1:] == BAD).any(axis=1)
    bad_hex = (hex_status == BAD).any(axis=1)
    is_bad = bad_cols | bad_label | bad_dense | bad_hex
    if is_bad.any():
        rows = np.flatnonzero(is_bad)

        def reason(k: int) -> str:
            i = rows[k]
            if bad_cols[i]:
                return f"expected {NUM_COLS} tab-separated columns (37-39 are padded), got {int(ncols[i])}"
            if bad_label[i]:
                return f"label (column 1) is not 0 or 1: {token(buf, starts[i, 0], ends[i, 0])}"
            if bad_dense[i]:
                j = int(np.flatnonzero(int_status[i, 1:] == BAD)[0])
                text = bytes(buf[starts[i, j + 1]:ends[i, j + 1]]).strip()
                what = "an integer outside the 64-bit range" if text.lstrip(b"+-").isdigit() else "not an integer"
                return f"column {j + 2} ({DENSE_NAMES[j]}) is {what}: {token(buf, starts[i, j + 1], ends[i, j + 1])}"
            j = int(np.flatnonzero(hex_status[i] == BAD)[0])
            c = 1 + NUM_DENSE + j
            return f"column {c + 1} ({CAT_NAMES[j]}) is not hexadecimal: {token(buf, starts[i, c], ends[i, c])}"

        bad.add_many(chunk.file, chunk.line_of(rows), reason)
        good = ~is_bad
        ints, hexes, hex_status = ints[good], hexes[good], hex_status[good]
        int_status = int_status[good]
    m = ints.shape[0]
    if m == 0:
        return n
    labels = ints[:, 0].astype(np.float32)
    dense = log1p_clamped(ints[:, 1:])  # empty cells parsed as 0 -> log1p(0) = 0
    pids = np.empty((m, NUM_CAT), dtype=np.int64)
    present = hex_status == 0
    for j, f in enumerate(fids):
        pids[:, j] = vocab.lookup(f, hexes[:, j], present[:, j])
    writer.add(np.full(m, NUM_CAT, dtype=np.int32), pids.reshape(-1), labels, dense)
    return n
