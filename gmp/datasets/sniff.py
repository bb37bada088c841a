"""Recognise a raw input from its first lines: delimiter, header, and which importer reads it.

Used in three places:

* every ``gmp data import`` starts here (:func:`gmp.datasets.dispatch.recognise_import`):
  with no FORMAT the recognised format is read; a FORMAT the file contradicts
  is refused with the command that reads it; for csv and Parquet
  :func:`propose_columns` names the label and the dense columns from the first
  :data:`SAMPLE_ROWS` rows (:func:`csv_sample`, :func:`parquet_sample`);
* ``gmp data import csv`` takes its delimiter from the content when ``--sep`` is not
  given (the extension says little: ``.txt`` files are tab-, comma- and
  space-separated alike);
* when most lines of an input fail to parse as the format asked for, the import
  stops with one short line that says what the file looks like and the exact
  command that would read it (:func:`advice`), instead of a list of identical
  line errors and a suggestion to skip them.

Recognised (first match wins; each rule looks at up to 50 complete lines):

==========  ====================================================================
criteo      tab-separated, 37-40 columns, label 0/1, 13 integer (or empty)
            columns, then hexadecimal (or empty) columns; no header
            (most lines: :data:`STEADY_SHARE`)
libffm      ``label field:idx:val ...`` (two colons per token; most lines)
libfm       ``label idx:val ...`` (one colon per token; also libsvm; most lines)
movielens   RecBole atomic files (``user_id:token`` headers) or the classic
            ``u.data`` (4 tab-separated integers per line: a 0-5 rating third,
            a 9- or 10-digit Unix timestamp fourth)
empty       one line of non-numeric cells: a header line and no data
avazu       a comma-separated header with ``id``, ``click`` and ``hour``
parquet     a file starting with ``PAR1`` (by its bytes, before any line is read)
csv         anything else with a consistent delimiter; with a header line the
            suggestion names the label column (``label``/``click``/``target``/
            ... or a 0/1 first column) and the numeric columns as ``--dense``
==========  ====================================================================

Column lists accept ranges of numbered names (``I1..I13``): :func:`expand_names`
reads them, :func:`compress_names` writes them.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

from ..errors import ImportDataError

MAX_LINES = 50
MAX_BYTES = 1 << 18
#: rows read to propose a csv/parquet file's label and dense columns
SAMPLE_ROWS = 2000
SAMPLE_BYTES = 1 << 20
#: a numeric column with at least this many distinct values in the sample (or a fractional one) is dense
DENSE_MIN_DISTINCT = 10
PARQUET_MAGIC = b"PAR1"
DELIMITERS = ("\t", ",", ";", "|", " ")
STEADY_SHARE = 0.6
_SEP_NAMES = {"\t": "tab", ",": "comma", ";": "semicolon", "|": "pipe", " ": "space"}
_SEP_FLAGS = {"\t": "tab", ",": ",", ";": "';'", "|": "'|'", " ": "space"}
#: label values taken as the positive class when a label column holds words, not numbers
POSITIVE_WORDS = ("yes", "y", "true", "t", "positive", "pos", "click", "clicked")
LABEL_NAMES = ("label", "click", "clicked", "target", "y", "is_click", "ctr_label", "rating", "income")
_NUM = re.compile(r"^[-+]?(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?$")
_INT = re.compile(r"^[-+]?\d+$")
#: not-a-number and infinities as Python and most writers spell them (a numeric column may hold a few)
_NONFINITE = re.compile(r"^[-+]?(nan|inf|infinity)$", re.IGNORECASE)
_HEX = re.compile(r"^[0-9a-fA-F]{1,16}$")
_FM = re.compile(r"^\d+:[-+0-9.eE]+$")
_FFM = re.compile(r"^\d+:\d+:[-+0-9.eE]+$")
_RANGE = re.compile(r"^(?P<prefix>.*?)(?P<a>\d+)\.\.(?P=prefix)?(?P<b>\d+)$")
_NUMBERED = re.compile(r"^(?P<prefix>.*?)(?P<n>\d+)$")


@dataclass(frozen=True)
class Guess:
    """What a file looks like and how to import it.

    ``args`` are the flags that follow ``gmp data import FORMAT PATH``.
    """

    format: str
    description: str
    sep: str | None = None
    header: tuple[str, ...] | None = None
    args: tuple[str, ...] = field(default_factory=tuple)

    def command(self, path: str | Path, out: str = "OUT") -> str:
        target = Path(path).parent if self.format == "movielens" else Path(path)
        return " ".join(["gmp data import", self.format, shlex.quote(str(target)), *self.args, "--out", out])


def expand_names(names: Sequence[str]) -> list[str]:
    """``["I1..I3", "x"]`` -> ``["I1", "I2", "I3", "x"]`` (``I1..3`` works too)."""
    out: list[str] = []
    for name in names:
        m = _RANGE.match(name)
        if m is None:
            out.append(name)
            continue
        a, b = int(m["a"]), int(m["b"])
        if b < a or b - a > 100_000:
            raise ImportDataError(f"column range {name!r}: expected PREFIXa..PREFIXb with a <= b, e.g. I1..I13.")
        out.extend(f"{m['prefix']}{i}" for i in range(a, b + 1))
    return out


def compress_names(names: Sequence[str]) -> list[str]:
    """Runs of three or more consecutively numbered names as ranges: ``I1, I2, I3`` -> ``I1..I3``."""
    out: list[str] = []
    i = 0
    while i < len(names):
        m = _NUMBERED.match(names[i])
        j = i
        while m and j + 1 < len(names):
            n = _NUMBERED.match(names[j + 1])
            if not n or n["prefix"] != m["prefix"] or int(n["n"]) != int(m["n"]) + (j + 1 - i):
                break
            j += 1
        if j - i >= 2:
            out.append(f"{names[i]}..{names[j]}")
            i = j + 1
        else:
            out.append(names[i])
            i += 1
    return out


def read_lines(path: Path, max_lines: int = MAX_LINES, max_bytes: int = MAX_BYTES) -> list[str]:
    """Up to ``max_lines`` complete lines from the start of ``path`` (gzip aware)."""
    from .streaming import read_head

    data = read_head(path, max_bytes)
    lines = data.split(b"\n")
    if len(data) >= max_bytes and len(lines) > 1:
        lines = lines[:-1]  # the last one may be cut
    text = [ln.rstrip(b"\r").decode("utf-8", errors="replace").lstrip("\ufeff") for ln in lines[:max_lines]]
    return [t for t in text if t.strip()]


def sniff(path: str | Path) -> Guess:
    """Guess the format of ``path`` from its first lines (see the module docstring).

    A directory is MovieLens when it holds a RecBole ``*.inter`` file or a classic
    ``u.data``; a file starting with ``PAR1`` is Parquet; a pipe or device is not
    read (its first lines would be lost to the import) and is ``unknown``.
    """
    p = Path(path)
    if p.is_dir():
        if any(p.glob("*.inter")) or (p / "u.data").is_file():
            return Guess("movielens", "a MovieLens directory (RecBole '*.inter' or classic 'u.data')")
        return Guess("unknown", "a directory")
    if not p.is_file():
        return Guess("unknown", "a pipe or device (not read ahead)")
    with open(p, "rb") as f:
        if f.read(4) == PARQUET_MAGIC:
            return Guess("parquet", "a Parquet file")
    return sniff_lines(read_lines(p), name=p.name)


def sniff_delimiter(lines: Sequence[str]) -> str | None:
    """The delimiter that splits the lines into a steady number (> 1) of columns.

    A candidate must occur on every line, and at least :data:`STEADY_SHARE` of the
    lines must have its most common count (real dumps drop trailing empty columns
    on some rows: Criteo rows have 37-40 columns); among those, the one giving the
    most columns wins. ``None`` when no candidate qualifies.
    """
    best, best_cols = None, 1
    for sep in DELIMITERS:
        counts = [ln.count(sep) for ln in lines]
        if not counts or min(counts) < 1:
            continue
        mode = max(set(counts), key=counts.count)
        if counts.count(mode) < STEADY_SHARE * len(counts):
            continue
        if mode + 1 > best_cols:
            best, best_cols = sep, mode + 1
    return best


def sniff_lines(lines: Sequence[str], *, name: str = "") -> Guess:
    """:func:`sniff` on lines already read (tests use this directly)."""
    if not lines:
        return Guess("unknown", "an empty file")
    tokens = [ln.split() for ln in lines]
    # most lines (STEADY_SHARE), as for Criteo: a libsvm file with a few broken lines is still libsvm, and
    # its import names them (with `max_bad_lines` to skip them)
    for pattern, fmt, what in ((_FFM, "libffm", "libffm lines ('label field:idx:val ...')"),
                               (_FM, "libfm", "libfm/libsvm lines ('label idx:val ...', one colon per token)")):
        good = [t for t in tokens if _NUM.match(t[0]) and all(pattern.match(x) for x in t[1:])]
        if any(len(t) > 1 for t in good) and len(good) >= STEADY_SHARE * len(tokens):
            return Guess(fmt, what)
    first = lines[0]
    if ":token" in first or ":float" in first:
        return Guess("movielens", "a RecBole atomic file (typed header such as 'user_id:token')")
    sep = sniff_delimiter(lines)
    if sep == "\t" and _looks_like_criteo([ln.split("\t") for ln in lines]):
        return Guess("criteo", "Criteo TSV rows (label, 13 integer and 26 hexadecimal columns, no header)")
    if sep is None:
        return Guess("unknown", "text without a consistent delimiter")
    rows = [ln.split(sep) for ln in lines]
    rows = [[c.strip().strip('"') for c in r] for r in rows]
    if sep == "\t" and _looks_like_udata(rows):
        return Guess("movielens", "MovieLens 'u.data' rows (user, item, rating, timestamp)")
    if len(rows) == 1 and not any(_NUM.match(c) or _NONFINITE.match(c) for c in rows[0] if c):
        return Guess("empty", f"a header line ({', '.join(compress_names(rows[0])[:6])}) and no data lines", sep,
                     tuple(rows[0]))
    has_header = len(rows) > 1 and _has_header(rows)
    ncols = len(rows[0])
    what = f"a {_SEP_NAMES[sep]}-separated file with {ncols} columns"
    if not has_header:
        return Guess("csv", f"{what} and no header line (the csv importer needs one)", sep)
    header = tuple(rows[0])
    lower = [h.lower() for h in header]
    if sep == "," and {"id", "click", "hour"} <= set(lower):
        return Guess("avazu", f"an Avazu CSV (header with id, click, hour, {ncols} columns)", sep, header)
    body = rows[1:]
    roles = propose_columns(header, body)
    label = roles.label or (roles.candidates[0] if roles.candidates else None)
    dense = [h for h in roles.dense if h != label]
    args: list[str] = ["--sep", _SEP_FLAGS[sep]] if sep != "," else ["--sep", ","]
    if label:
        args += ["--label", label]
        positive = positive_label(sorted(set(r[header.index(label)] for r in body if len(r) == ncols) - {""}))
        if positive is not None:
            args += ["--label-positive", shlex.quote(positive)]
    else:
        args += ["--label", "LABEL_COLUMN"]
    if dense:
        args += ["--dense", ",".join(compress_names(dense))]
    names = compress_names(list(header))
    shown = ", ".join(names[:6]) + (", ..." if len(names) > 6 else "")
    return Guess("csv", f"{what} and a header line ({shown})", sep, header, tuple(args))


def advice(path: str | Path, fmt: str, *, bad: int, lines_read: int | None, first_reason: str) -> str | None:
    """One line for an import where most lines failed, or ``None`` if the file looks like ``fmt`` (or like
    a format the same importer reads). ``lines_read`` None: the count is not known for this file alone (a
    later input of several), so the line gives no count."""
    from .streaming import same_importer

    guess = sniff(path)
    if same_importer(guess.format) == same_importer(fmt) and fmt != "csv":
        return None  # libsvm and libfm are one importer: naming the other would run the same failing import
    if guess.format in ("unknown", "empty") or (guess.format == "csv" and guess.header is None):
        return None  # nothing that reads the file could be named
    counted = (f"{bad:,} of the first {lines_read:,} lines are" if lines_read is not None
               else "most of its lines read are")
    return (f"{path}: {counted} not valid {fmt} (e.g. {first_reason}); "
            f"the file looks like {guess.description}. Read it with: {guess.command(path)}")


def check_header(path: str | Path, fmt: str, label: str | None = None) -> None:
    """Refuse, in one line with the right command, a ``csv``/``avazu`` input whose first
    line is data rather than a header (e.g. a Criteo TSV, a libfm file). A first line that
    names the ``label`` column the user gave is a header whatever else it holds (numeric
    column names, a header-only file, a header repeated by ``cat``)."""
    if label is not None:
        from .streaming import cell_text

        lines = read_lines(Path(path))
        cells = re.split(r"[,\t;| ]", lines[0]) if lines else []
        if label in {cell_text(c) for c in cells}:
            return
    guess = sniff(path)
    if guess.format in ("criteo", "libfm", "libffm", "movielens") or (guess.format == "csv" and guess.header is None):
        raise ImportDataError(f"{path}: the {fmt} importer needs a header line naming the columns, but the file "
                              f"looks like {guess.description}. Read it with: {guess.command(path)}")


def _looks_like_udata(rows: list[list[str]]) -> bool:
    """MovieLens ``u.data``: 4 integer columns, the third a star rating (0 to 5) and the fourth a Unix
    timestamp (9 or 10 digits: 1973 to 2286). Any other 4 integer columns are not taken for ratings."""
    def ok(r: list[str]) -> bool:
        return (len(r) == 4 and all(_INT.match(c) for c in r) and 0 <= int(r[2]) <= 5
                and 10**8 <= int(r[3]) < 10**10)

    return all(ok(r) for r in rows)


def _looks_like_criteo(rows: list[list[str]]) -> bool:
    """Most rows (:data:`STEADY_SHARE`) are Criteo rows: a file of Criteo rows with some
    malformed lines is still Criteo."""
    def ok(r: list[str]) -> bool:
        return (37 <= len(r) <= 40 and r[0] in ("0", "1") and all(c == "" or _INT.match(c) for c in r[1:14])
                and all(c == "" or _HEX.match(c) for c in r[14:]))

    return sum(ok(r) for r in rows) >= STEADY_SHARE * len(rows)


def _has_header(rows: list[list[str]]) -> bool:
    """The first row is a header when none of its cells is a number but some column
    below it holds numbers, or when all its cells differ from every value below them."""
    first, body = rows[0], rows[1:]
    if any(_NUM.match(c) for c in first if c):
        return False
    for j, h in enumerate(first):
        col = [r[j] for r in body if j < len(r) and r[j]]
        if col and all(_NUM.match(c) for c in col):
            return True
    return all(h not in {r[j] for r in body if j < len(r)} for j, h in enumerate(first))


def positive_label(values: list[str]) -> str | None:
    """The ``--label-positive`` value for a label column of words (``yes``/``no``), None when its
    values are numbers (the importer reads those itself): a word that means "positive" if there is one,
    else the upper side of a threshold label (``>50K`` against ``<=50K``: UCI Adult), else the first value
    in sorted order (the person checks it; the command then reads the file)."""
    if not values or all(_NUM.match(v) for v in values):
        return None
    for v in values:
        if v.lower() in POSITIVE_WORDS:
            return v
    above = [v for v in values if v.startswith(">")]
    if len(above) == 1 and any(v.startswith("<") for v in values):
        return above[0]
    return values[0]


def _is_dense(name: str, values: list[str]) -> bool:
    """A numeric column with many distinct values (:data:`DENSE_MIN_DISTINCT`) or a fractional one; not an id.

    A numeric column with few values (a 0/1 flag, a 1-5 code) reads better as categorical. A minority of
    ``nan``/``inf`` cells does not make it text: it is still dense, and the import names those lines as
    malformed (one id per float, silently, was the alternative)."""
    if re.match(r"^(C\d+|id|.*_id|.*id)$", name, flags=re.IGNORECASE):
        return False
    cells = [v for v in values if v]
    odd = sum(1 for v in cells if _NONFINITE.match(v))
    filled = {v for v in cells if not _NONFINITE.match(v)}
    if not filled or 2 * odd >= len(cells) or not all(_NUM.match(v) for v in filled):
        return False
    return len(filled) >= DENSE_MIN_DISTINCT or any(float(v) % 1 for v in filled)


@dataclass(frozen=True)
class ColumnRoles:
    """What the first rows of a table with a header suggest (:func:`propose_columns`).

    ``label`` is the label column when one stands out (a column named as in
    :data:`LABEL_NAMES`, in that order of preference, or the only column holding
    just two of -1/0/1), else ``None``; ``candidates`` the columns that could be it
    (several 0/1 columns: the person chooses). ``dense`` are the numeric columns with
    many distinct values (:func:`_is_dense`), the label left out. ``values`` holds
    each column's cells in the rows read (``num_rows``).
    """

    header: tuple[str, ...]
    label: str | None
    candidates: tuple[str, ...]
    dense: tuple[str, ...]
    num_rows: int
    values: dict[str, list[str]] = field(default_factory=dict, compare=False)

    def distinct(self, column: str) -> list[str]:
        """The distinct non-empty values of ``column`` in the rows read, sorted."""
        return sorted({v for v in self.values.get(column, []) if v})


def propose_columns(header: Sequence[str], rows: Sequence[Sequence[str]]) -> ColumnRoles:
    """The label and dense columns of a table from its header and first rows (cells as text, ``""`` empty)."""
    values = {h: [r[j] for r in rows if j < len(r)] for j, h in enumerate(header) if h}
    named = next((h for want in LABEL_NAMES for h in values if h.lower() == want), None)
    binary = [h for h, col in values.items() if _is_binary(col)]
    label = named or (binary[0] if len(binary) == 1 else None)
    candidates = (named,) if named else tuple(binary)
    dense = tuple(h for h, col in values.items() if h != label and _is_dense(h, col))
    return ColumnRoles(tuple(header), label, candidates, dense, len(rows), values)


def is_number(text: str) -> bool:
    """``text`` reads as a decimal number (``1``, ``-2.5``, ``3e-4``)."""
    return _NUM.match(text) is not None


def _is_binary(values: Sequence[str]) -> bool:
    """Two distinct values, both of -1, 0, 1 (a 0/1 or -1/+1 label column)."""
    filled = {v for v in values if v}
    if not filled or not all(_NUM.match(v) for v in filled):
        return False
    nums = {float(v) for v in filled}
    return len(nums) == 2 and nums <= {-1.0, 0.0, 1.0}


def delimiter_of(path: Path) -> str:
    """The delimiter recognised from the first lines (:func:`sniff_delimiter`); when no candidate
    splits every line alike, tab for ``.tsv``/``.tab`` files and comma otherwise."""
    sep = sniff_delimiter(read_lines(path))
    if sep is not None:
        return sep
    return "\t" if path.name.lower().endswith((".tsv", ".tsv.gz", ".tab")) else ","


def csv_sample(path: Path, sep: str) -> tuple[list[str], list[list[str]]]:
    """(header, rows) of the first :data:`SAMPLE_ROWS` rows of a delimited file, cells as the csv
    importer reads them (the first line is the header, as the importer takes it)."""
    from .streaming import cell_text

    lines = read_lines(path, SAMPLE_ROWS + 1, SAMPLE_BYTES)
    if not lines:
        return [], []
    header = [c.strip().strip('"') for c in lines[0].split(sep)]
    return header, [[cell_text(c) for c in ln.split(sep)] for ln in lines[1:]]


def parquet_sample(path: Path) -> tuple[list[str], list[list[str]]]:
    """(header, rows) of the first :data:`SAMPLE_ROWS` rows of a Parquet file, cells as text: integers
    and booleans as numbers (``1``/``0``), floats as Python writes them, null as ``""``; lists are not
    numbers (they are never dense nor a label)."""
    try:
        import pyarrow.parquet as pq
    except ImportError:
        return [], []  # the importer says how to install it
    try:
        pf = pq.ParquetFile(path)
        header = list(pf.schema_arrow.names)
        batch = next(pf.iter_batches(batch_size=SAMPLE_ROWS), None)
    except Exception:  # pyarrow's errors: the importer reports them in its words
        return [], []
    if batch is None:
        return header, []
    cols = [_texts(batch.column(j).to_pylist()) for j in range(batch.num_columns)]
    return header, [list(r) for r in zip(*cols)]


def _texts(values: list) -> list[str]:
    out = []
    for v in values:
        if v is None:
            out.append("")
        elif isinstance(v, bool):
            out.append(str(int(v)))
        elif isinstance(v, (int, float, str)):
            out.append(str(v))
        else:  # lists, structs, dates: not numbers
            out.append(f"<{type(v).__name__}>")
    return out
