"""Importers for sparse text formats: libsvm / libfm and libffm.

libsvm and libfm (the same line syntax)::

    1 3:1 17:1 120:0.5
    -1 5:1 17:1

``label idx:val ...`` separated by spaces or tabs. The *field* of a token is
its position on the line (token 1 -> field ``f1``, token 2 -> ``f2``, ...),
the way CTR data sets converted to libsvm (e.g. Criteo's) lay out one token
per field; ``idx`` is the value within that field. A line with fewer tokens
simply has no id in the later fields (fields are discovered while reading,
so these formats never emit a field's missing id; it stays unused).

libffm::

    1 0:3:1 1:17:1 2:120:1

``label field:idx:val ...``: the field is given (named ``f<field>``); a field
repeated on one line is a multi-valued field.

For both:

* label: a number; label = 1 when it is > 0 (so 0/1 and -1/+1 both work).
* ``idx`` (and ``field``) must be non-negative integers and ``val`` a number.
  The prepared format is binary (multi-hot): a token with ``val == 0`` is
  dropped (absent), any other value means "present" (its magnitude is not
  kept; it is checked only).
* malformed lines: non-numeric label, a token that is not ``idx:val``
  (``field:idx:val`` for libffm), a negative or non-integer index, a
  non-numeric value.

These are parsed line by line in Python (variable-length lines); that is
fine for the small libsvm data sets these formats are used for here. Long
lines make many fields; the per-field work is linear in the tokens (3 lines
of 200,000 tokens: 16 s and 0.70 GB, from 120 s and 3.85 GB when each field
was selected by a mask over the chunk and started with a 16 KB table).
"""

from __future__ import annotations

import math
import os
from typing import Any, Sequence

import numpy as np

from ..errors import ImportDataError
from ..progress import task
from .format import DatasetWriter
from .streaming import BadLines, CommonOptions, check_inputs, finish_import, iter_chunks, total_size
from .vocab import Vocabulary


class _BadLine(Exception):
    pass


def _num(text: bytes, what: str) -> float:
    try:
        v = float(text)
    except ValueError:
        raise _BadLine(f"{what} is not a number: {text.decode('utf-8', 'replace')[:24]!r}") from None
    if not math.isfinite(v):
        raise _BadLine(f"{what} is not a finite number: {text.decode('utf-8', 'replace')[:24]!r}")
    return v


#: indices are 64-bit vocabulary keys
_MAX_INDEX = 2**64 - 1


#: libffm field numbers name fields (f0, f1, ...): a few thousand at most in practice
_MAX_FIELD = 2**31 - 1


def _index(text: bytes, what: str, tok: bytes, limit: int = _MAX_INDEX) -> int:
    if not text.isdigit():
        raise _BadLine(f"{what} in {tok.decode('utf-8', 'replace')[:24]!r} is not a non-negative integer")
    # leading zeros do not count; more digits than the limit has is larger, without int() (which refuses
    # more than 4,300 digits with a ValueError of its own)
    digits = text.lstrip(b"0") or b"0"
    v = int(digits) if len(digits) <= len(str(limit)) else limit + 1
    if v > limit:
        raise _BadLine(f"{what} in {tok.decode('utf-8', 'replace')[:24]!r} is larger than {limit}")
    return v


def import_libsvm(inputs: Sequence[str | os.PathLike], out: str | os.PathLike, *, ffm: bool = False,
                  fmt: str = "libsvm", common: CommonOptions | None = None) -> dict[str, Any]:
    """Import libsvm/libfm (``ffm=False``) or libffm (``ffm=True``) text."""
    common = common or CommonOptions()
    paths = check_inputs(inputs, streams=True, fmt=fmt)
    vocab = Vocabulary(min_count=common.min_count, hash_sizes=common.hash_sizes)
    # Fields are discovered while reading; hashed fields must be known up front.
    fields: dict[int, int] = {}  # field number -> vocab index
    multi: set[int] = set()
    expect = "field:idx:val" if ffm else "idx:val"
    bad = BadLines(common.max_bad_lines)
    lines_read = 0
    with DatasetWriter(out, num_dense=0, overwrite=common.overwrite, inputs=paths) as writer, \
            task(f"Importing {fmt}", total=total_size(paths), unit="B") as advance:
        for path in paths:
            common.begin_input(writer, path)
            last = 0
            for chunk in iter_chunks(path, chunk_bytes=common.chunk_bytes):
                bad.skip_blank(chunk)
                lines = chunk.data.split(b"\n")
                if chunk.data.endswith(b"\n"):
                    lines.pop()
                lengths, field_nums, keys, labels = [], [], [], []
                for k, line in enumerate(lines):
                    toks = line.split()
                    try:
                        label = _num(toks[0], "label")
                        row_f, row_k = [], []
                        for pos, tok in enumerate(toks[1:], start=1):
                            parts = tok.split(b":")
                            if len(parts) != (3 if ffm else 2):
                                raise _BadLine(f"token {pos} {tok.decode('utf-8', 'replace')[:24]!r} is not {expect}")
                            f = _index(parts[0], "field", tok, _MAX_FIELD) if ffm else pos
                            idx = _index(parts[-2], "index", tok)
                            if _num(parts[-1], f"value of token {pos}") != 0.0:
                                row_f.append(f)
                                row_k.append(idx)
                    except _BadLine as exc:
                        bad.add(chunk.file, chunk.line_of(k), str(exc))
                        continue
                    if ffm and len(set(row_f)) != len(row_f):
                        multi.update(f for f in row_f if row_f.count(f) > 1)
                    lengths.append(len(row_f))
                    field_nums.extend(row_f)
                    keys.extend(row_k)
                    labels.append(1.0 if label > 0 else 0.0)
                lines_read += len(lines)
                bad.check(name=", ".join(map(str, paths)), lines_read=lines_read)
                advance(chunk.progress - last)
                last = chunk.progress
                if not lengths:
                    continue
                fnum = np.asarray(field_nums, dtype=np.int64)
                karr = np.asarray(keys, dtype=np.uint64) if keys else np.zeros(0, np.uint64)
                pids = np.empty(fnum.size, dtype=np.int64)
                # the tokens grouped by field in one sort (a mask per field was quadratic: 3 lines of 200k
                # tokens took 120 s), each group in line order, the fields ascending as before
                by_field = np.argsort(fnum, kind="stable")
                cuts = np.flatnonzero(np.diff(fnum[by_field])) + 1
                for group in np.split(by_field, cuts) if fnum.size else ():  # lines of only zero values: no token
                    f = int(fnum[group[0]])
                    if f not in fields:
                        fields[f] = vocab.add_field(f"f{f}")
                    pids[group] = vocab.lookup(fields[f], karr[group], np.ones(group.size, bool))
                writer.add(np.asarray(lengths, np.int32), pids, np.asarray(labels, np.float32))
        if not fields and writer.num_samples:  # (no line, or none valid: finish_import says so)
            # as csv refuses an input without categorical columns: a dataset of 0 fields has nothing to embed
            raise ImportDataError(f"{', '.join(map(str, paths))}: no features to import: every line is a label "
                                  f"alone or its tokens' values are all 0 (a token of value 0 is absent); pass "
                                  f"a {fmt} file whose lines hold {expect} tokens with non-zero values.")
        vocab.check_hash_fields()
        for f in multi:
            vocab.set_kind(fields[f], "multi")
        # Fields in numeric order (they were registered in order of first appearance).
        vocab.reorder([fields[f] for f in sorted(fields)])
        return finish_import(writer, vocab, bad, fmt=fmt, paths=paths, lines_read=lines_read, common=common,
                             format_options={"field": "given (libffm)" if ffm else "token position"},
                             dedupe=True if ffm else None, discovered_fields=True)
