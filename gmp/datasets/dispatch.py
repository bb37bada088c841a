"""One entry point for every importer: :func:`import_dataset` and the registry of formats.

``IMPORTERS`` maps a format name to ``(module, function)``; the module is imported
only when its format is used (parquet needs pyarrow). Each importer takes
``(inputs, out, common=CommonOptions, **format_options)`` and returns the written
``dataset.json`` header.

What :func:`import_dataset` adds to the importers:

* **Advice on the wrong format.** When most lines read so far are malformed, the
  file is sniffed (:mod:`gmp.datasets.sniff`) and the error becomes one line naming
  what the file looks like and the command that reads it.
* **Recognition before reading** (:func:`recognise_import`). The input's format is
  recognised (:mod:`gmp.datasets.sniff`) before any option is checked: with no
  format given it is the format; a format the file contradicts is refused with
  what the file is and the command that reads it. For csv and Parquet the label
  (a column named ``label``/``click``/``target``/``y``/``rating``/..., or the only
  0/1 column) and the dense columns (numeric, many distinct values) are proposed;
  a text label is refused with the values seen and ``--label-positive``.
* **A provided test split.** ``test_inputs`` are read after ``inputs``; their
  samples, and only those, form the test set (``split.method = "provided"``).
"""

from __future__ import annotations

import importlib
import os
import shlex
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple, Sequence

from .._io import release_claim_on_error
from ..errors import ImportDataError
from .streaming import CommonOptions, MalformedInputError, check_inputs

IMPORTERS: dict[str, tuple[str, str]] = {
    "criteo": ("gmp.datasets.criteo", "import_criteo"),
    "avazu": ("gmp.datasets.avazu", "import_avazu"),
    "movielens": ("gmp.datasets.movielens", "import_movielens"),
    "libsvm": ("gmp.datasets.libsvm", "import_libsvm"),
    "libfm": ("gmp.datasets.libsvm", "import_libsvm"),
    "libffm": ("gmp.datasets.libsvm", "import_libsvm"),
    "csv": ("gmp.datasets.csvfmt", "import_csv"),
    "parquet": ("gmp.datasets.parquet", "import_parquet"),
}
FORMATS = tuple(IMPORTERS)
#: other names of a format (``tsv``: the csv importer reads any delimiter, tab included)
FORMAT_ALIASES = {"tsv": "csv"}
#: formats whose inputs are line-oriented text (sniffed when most lines fail)
TEXT_FORMATS = ("criteo", "avazu", "libsvm", "libfm", "libffm", "csv")
#: the share of malformed lines above which the file is taken for another format
WRONG_FORMAT_SHARE = 0.5


@release_claim_on_error("out")
def import_dataset(fmt: str, inputs: Sequence[str | os.PathLike], out: str | os.PathLike, *,
                   common: CommonOptions | None = None, test_inputs: Sequence[str | os.PathLike] = (),
                   **options: Any) -> dict[str, Any]:
    """Import raw ``inputs`` of format ``fmt`` into a prepared dataset at ``out``.

    Parameters
    ----------
    fmt
        One of :data:`FORMATS`.
    inputs, test_inputs
        Input files; with ``test_inputs`` the test set is exactly their samples
        (``common.test_fraction`` is then not used).
    common
        Options every importer takes (min count, hashing, bad lines, overwrite).
    options
        Format-specific options (see each importer).

    Returns
    -------
    dict
        The written ``dataset.json`` header.
    """
    fmt = str(fmt).lower()
    fmt = FORMAT_ALIASES.get(fmt, fmt)
    if fmt not in IMPORTERS:
        raise ImportDataError(f"unknown format {fmt!r}; choose one of {', '.join(FORMATS)}.")
    common = common or CommonOptions()
    from .._io import check_output_dir
    from .format import DATASET_FILES, FORMAT

    # claimed before any input is read (csv/avazu headers, movielens side files, parquet schemas are read
    # before the writer opens): a second writer is refused from the start, and a directory put at out
    # meanwhile is found at the swap and left as it is. The dataset it extends is an input too.
    given = [*inputs, *test_inputs, *([common.extend] if common.extend else [])]
    check_output_dir(out, kind=FORMAT, overwrite=common.overwrite, inputs=given, own=DATASET_FILES)
    # the format's importer checks every input again, refusing a pipe where it reads the header first
    tests = check_inputs(test_inputs, streams=True, fmt=fmt) if test_inputs else []
    # realpath, not Path.resolve: a symlink loop raises RuntimeError there (check_inputs names it)
    both = {Path(os.path.realpath(p)) for p in tests} & {Path(os.path.realpath(p)) for p in inputs}
    if both:  # by resolved path: ./a.csv and $PWD/a.csv are one file, and its samples would train and test
        raise ImportDataError(f"{sorted(both)[0]} is given both as an input and as a test input; give it once.")
    if tests and fmt == "movielens":
        raise ImportDataError("test inputs do not apply to movielens (one ratings file with its side files); "
                              "split it by `test_fraction`.")
    check_compression([*inputs, *tests])
    _check_same_format(fmt, [*inputs[1:], *tests])
    module, name = IMPORTERS[fmt]
    importer = getattr(importlib.import_module(module), name)
    if fmt in ("libsvm", "libfm", "libffm"):
        options = {"ffm": fmt == "libffm", "fmt": fmt, **options}
    if tests:
        common = common.with_test_inputs(tests)
    all_inputs = [*inputs, *tests]
    if fmt in ("csv", "avazu"):
        from .sniff import check_header

        label = getattr(options.get("options"), "label", None)  # csv: the column the user named
        for p in check_inputs(all_inputs, fmt=fmt):
            check_header(p, fmt, label)
    try:
        return importer(all_inputs, out, common=common, **options)
    except MalformedInputError as exc:
        first = exc.first[0] if exc.first else None
        if fmt in TEXT_FORMATS and first and exc.count > WRONG_FORMAT_SHARE * max(1, exc.lines_read):
            from .sniff import advice

            # lines_read counts every input read so far: a count for a later input would mix in the earlier ones'
            alone = str(first["file"]) == str(all_inputs[0])
            hint = advice(Path(first["file"]), fmt, bad=exc.count, lines_read=exc.lines_read if alone else None,
                          first_reason=f"line {first['line']}: {first['reason']}")
            if hint:
                raise ImportDataError(hint) from None
        if fmt == "criteo" and first and exc.count == 1 and first["line"] == 1 and exc.lines_read > 1:
            hint = _header_line(Path(first["file"]))
            if hint:
                raise ImportDataError(hint) from None
        raise


def _header_line(path: Path) -> str | None:
    """One line for a Criteo file whose only malformed line is a header line (no cell a number), else None."""
    from .sniff import compress_names, is_number, read_lines

    lines = read_lines(path, 1) if path.is_file() else []
    cells = lines[0].split("\t") if lines else []
    if not cells or any(is_number(c.strip()) for c in cells if c.strip()):
        return None
    names = compress_names([c.strip() for c in cells])
    shown = ", ".join(names[:6]) + (", ..." if len(names) > 6 else "")
    return (f"{path}: line 1 looks like a header line ({shown}), which Criteo files do not have; remove it or "
            f"pass `max_bad_lines` 1 to skip it.")


#: the first bytes of compressed files gmp does not read, and the command that decompresses each
_COMPRESSED = ((b"BZh", "bzip2", "bunzip2 -k"), (b"\xfd7zXZ\x00", "xz", "unxz -k"),
               (b"\x28\xb5\x2f\xfd", "zstd", "unzstd"))


def check_compression(paths: Sequence[str | os.PathLike]) -> None:
    """Refuse a bzip2, xz or zstd input (by its magic bytes) in one line: gmp reads plain text and gzip, and
    the compressed bytes read as text were "cannot tell its format" or a list of malformed lines."""
    for p in paths:
        path = Path(p)
        try:
            if not path.is_file():  # a pipe is not read ahead; a missing file is named by its importer
                continue
            with open(path, "rb") as f:
                head = f.read(6)
        except OSError:
            continue
        for magic, kind, tool in _COMPRESSED:
            if head.startswith(magic):
                raise ImportDataError(f"{path} is {kind}-compressed, and gmp reads plain text and gzip only; "
                                      f"decompress it ({tool} {shlex.quote(str(path))}) or recompress it with gzip.")


def _check_same_format(fmt: str, paths: Sequence[str | os.PathLike]) -> None:
    """Refuse a later input (or a test input) that is recognised as another format than ``fmt``, before any
    line is read: its lines would all be malformed, counted together with the earlier inputs' lines."""
    from .sniff import sniff

    for p in paths:
        path = Path(p)
        if not path.is_file():
            continue
        guess = sniff(path)
        if _contradicts(fmt, guess):
            raise ImportDataError(f"{path} looks like {guess.description}, not {fmt} input like the first input; "
                                  f"give inputs and test inputs of one format (import the other one separately).")


# --------------------------------------------------------------------------
# recognition: which importer, and for csv/parquet which columns
# --------------------------------------------------------------------------
_SEP_FLAGS = {"\t": "tab", " ": "space"}


def sep_char(flag: str | None) -> str | None:
    """The delimiter a ``sep`` option names (``tab``, ``\\t``, ``comma``, ``space`` or the character)."""
    return {"\\t": "\t", "tab": "\t", "comma": ",", "space": " "}.get(flag, flag) if flag is not None else None


@dataclass(frozen=True)
class ColumnChoice:
    """The column options of a csv/Parquet import as the person gave them (``None``: not given)."""

    label: str | None = None
    label_positive: str | None = None
    label_threshold: float | None = None
    categorical: tuple[str, ...] | None = None
    multi: tuple[str, ...] = ()
    multi_sep: str = "|"
    dense: tuple[str, ...] | None = None
    dense_transform: str = "log1p"
    ignore: tuple[str, ...] = ()
    sep: str | None = None  # as given (``tab``, ``;``, ...): :func:`sep_char` reads it

    def csv_options(self):
        """The importer's :class:`~gmp.datasets.csvfmt.CsvOptions` (checks the values)."""
        from .csvfmt import CsvOptions

        return CsvOptions(label=self.label or "", categorical=None if self.categorical is None else list(self.categorical),
                          multi=list(self.multi), dense=list(self.dense or ()), ignore=list(self.ignore),
                          sep=sep_char(self.sep), multi_sep=self.multi_sep, label_positive=self.label_positive,
                          label_threshold=0.5 if self.label_threshold is None else self.label_threshold,
                          dense_transform=self.dense_transform)

    def args(self) -> list[str]:
        """The ``gmp data import`` flags that give these options."""
        from .sniff import compress_names

        out: list[str] = []

        def add(flag: str, value: Any) -> None:
            out.extend([flag, shlex.quote(str(value))])

        if self.sep is not None:
            add("--sep", _SEP_FLAGS.get(sep_char(self.sep), self.sep))
        if self.label is not None:
            add("--label", self.label)
        if self.label_positive is not None:
            add("--label-positive", self.label_positive)
        if self.label_threshold is not None:
            add("--label-threshold", f"{self.label_threshold:g}")
        if self.categorical is not None:
            add("--cat", ",".join(compress_names(list(self.categorical))))
        if self.multi:
            add("--multi", ",".join(self.multi))
        if self.multi_sep != "|":
            add("--multi-sep", self.multi_sep)
        if self.dense:
            add("--dense", ",".join(compress_names(list(self.dense))))
        if self.dense_transform != "log1p":
            add("--dense-transform", self.dense_transform)
        if self.ignore:
            add("--ignore", ",".join(self.ignore))
        return out


@dataclass(frozen=True)
class ImportRecipe:
    """What :func:`recognise_import` decided: the format, the column options, and what came from recognition.

    ``proposed`` names what recognition chose (``"format"``, ``"label"``, ``"dense"``,
    ``"label_threshold"``); ``numeric_categorical`` the numeric-looking columns (many distinct
    values) that are imported as categorical by default (:meth:`numeric_warning`), and
    ``numeric_distinct`` their distinct values in the first ``sample_rows`` rows, which recognition read.
    """

    format: str
    description: str
    columns: ColumnChoice = field(default_factory=ColumnChoice)
    proposed: tuple[str, ...] = ()
    numeric_categorical: tuple[str, ...] = ()
    numeric_distinct: tuple[int, ...] = ()
    sample_rows: int = 0
    header: tuple[str, ...] = ()  # the csv/Parquet columns in file order (orders the suggested --dense)

    def command(self, inputs: Sequence[str | os.PathLike], out: str | os.PathLike, extra: Sequence[str] = ()) -> str:
        """The ``gmp data import`` command line of this recipe (``extra``: the other flags, as typed)."""
        cols = self.columns.args() if self.format in ("csv", "parquet") else []
        return " ".join(["gmp data import", self.format, *(shlex.quote(str(p)) for p in inputs), *cols, *extra,
                         "--out", shlex.quote(str(out))])

    def numeric_warning(self, meta: dict[str, Any]) -> str | None:
        """One line naming the numeric-looking columns the import made categorical, with their distinct
        values (from the written header ``meta``); ``None`` when there are none.

        Below ``min_count`` the values share the field's rare id and the header counts only the kept
        ones, so the distinct values are then those recognition saw (in its first rows, unless they
        were the whole input), followed by the kept ones."""
        fields = {f["name"]: f for f in meta.get("fields", [])}
        source = meta.get("source", {})
        min_count = int(source.get("options", {}).get("min_count", 1))
        sampled = dict(zip(self.numeric_categorical, self.numeric_distinct))
        whole = self.sample_rows >= int(source.get("num_lines", 0))  # recognition read every row
        where = "" if whole else f" in the first {self.sample_rows:,} rows"

        def count(c: str) -> str:
            kept = int(fields[c]["num_values"]) - 2
            if min_count == 1 or c not in sampled:  # one id per value: the header counts them
                return f"{kept:,} distinct values"
            return f"{sampled[c]:,} distinct values{where}, {kept:,} kept"

        seen = [c for c in self.numeric_categorical
                if c in fields and fields[c].get("kind") == "categorical" and not fields[c].get("hash_buckets")]
        if not seen:
            return None
        from ..wording import plural
        from .sniff import compress_names

        shown = ", ".join(f"{c} ({count(c)})" for c in seen[:6]) + (", ..." if len(seen) > 6 else "")
        ids = ("one id per distinct value" if min_count == 1 else
               f"one id per value seen at least {min_count} times, one rare id for the others")
        # the --dense to pass holds the columns already given too: passing only the new ones would drop those
        given = [c for c in (self.columns.dense or ()) if c not in seen]
        dense = sorted([*given, *seen], key=lambda c: self.header.index(c) if c in self.header else len(self.header))
        return (f"warning: {len(seen)} numeric-looking {plural('column', len(seen))} imported as categorical "
                f"({ids}): {shown}; to read them as numbers pass "
                f"--dense {','.join(compress_names(dense))}.")


def recognise_import(fmt: str | None, inputs: Sequence[str | os.PathLike], out: str | os.PathLike, *,
                     columns: ColumnChoice = ColumnChoice(), extra_args: Sequence[str] = (),
                     extend: str | os.PathLike | None = None) -> ImportRecipe:
    """Recognise the first input and decide how to import it, before any option is checked.

    Parameters
    ----------
    fmt
        The format the person named, or ``None`` to take the recognised one.
    inputs, out
        The input paths and the output directory (for the commands in messages).
    columns
        The csv/Parquet column options as given; recognition fills in what is missing.
    extra_args
        The command's other flags as typed, repeated in the commands this function suggests.
    extend
        The dataset this import extends (``--extend``): csv/Parquet columns not given take its roles
        (its label and dense columns, :func:`parent_roles`), not the ones proposed from this input,
        which an extension must not change.

    Raises
    ------
    ImportDataError
        The format cannot be told, the file contradicts ``fmt``, or a csv/Parquet label is not
        clear (no candidate or several, text values, numbers other than 0/1): one line saying
        what the file is and the command to run.
    """
    from .sniff import sniff

    if not inputs:
        raise ImportDataError("no input files given; pass at least one INPUT path.")
    first = Path(inputs[0])
    if not first.exists():
        check_inputs([first], streams=True)  # names a missing file, a dangling link or a symlink loop
    check_compression(inputs)
    guess = sniff(first)
    proposed: list[str] = []

    def cmd(f: str, choice: ColumnChoice = ColumnChoice()) -> str:
        return ImportRecipe(f, "", choice).command(inputs, out, extra_args)

    if fmt is None:
        if guess.format == "unknown":
            raise ImportDataError(f"{first}: cannot tell its format ({guess.description}); name it: "
                                  f"gmp data import FORMAT {shlex.quote(str(first))} --out {shlex.quote(str(out))} with "
                                  f"FORMAT one of {', '.join(FORMATS)}.")
        if guess.format == "empty":  # a header line alone: as the csv importer says it, not "add a header"
            raise ImportDataError(f"{first}: the input is empty (no data lines, only the header line); pass a "
                                  f"non-empty csv file.")
        if guess.format == "csv" and guess.header is None:
            raise ImportDataError(f"{first} looks like {guess.description}; add a first line naming the columns "
                                  f"(one of them the label), then run: {cmd('csv')}")
        fmt = guess.format
        proposed.append("format")
    else:
        fmt = str(fmt).lower()
        fmt = FORMAT_ALIASES.get(fmt, fmt)
        if fmt not in IMPORTERS:
            raise ImportDataError(f"unknown format {fmt!r}; choose one of {', '.join(FORMATS)}.")
        if _contradicts(fmt, guess):
            if guess.format in ("csv", "parquet"):
                try:
                    right = cmd(guess.format, _choose_columns(guess.format, first, ColumnChoice(), True).choice)
                except ImportDataError:
                    right = cmd(guess.format, ColumnChoice(label="LABEL_COLUMN"))
            else:
                right = cmd(guess.format)
            raise ImportDataError(f"{first} looks like {guess.description}, not {fmt} input. Read it with: {right}")
    if fmt not in ("csv", "parquet"):
        return ImportRecipe(fmt, guess.description, columns, tuple(proposed))
    cols = _choose_columns(fmt, first, columns, "format" in proposed,
                           parent=None if extend is None else parent_roles(extend, fmt))
    if cols.problem:
        raise ImportDataError(f"{first}: {cols.problem}. Run: {cmd(fmt, cols.choice)}")
    return ImportRecipe(fmt, guess.description, cols.choice, tuple(proposed + cols.proposed), tuple(cols.numeric),
                        tuple(cols.numeric.values()), cols.num_rows, tuple(cols.header))


def _contradicts(fmt: str, guess) -> bool:
    """The file is recognised as something ``fmt`` does not read."""
    from .streaming import same_importer

    got = guess.format
    if got in ("unknown", "empty") or same_importer(fmt) == same_importer(got):
        return False
    if got == "csv" and guess.header is None:  # headerless delimited text: only criteo/avazu/csv say more
        return fmt == "parquet"
    if fmt == "csv" and got == "avazu":  # an Avazu CSV read as a generic csv: the person's choice
        return False
    if fmt == "avazu" and got == "csv":  # the avazu importer names a missing column itself
        return not {"id", "hour"} <= {h.lower() for h in guess.header}
    return True


class ParentRoles(NamedTuple):
    """The column roles of the csv/Parquet dataset an import extends: its label column (None when its header
    does not say) and its dense columns, in order."""

    label: str | None
    dense: tuple[str, ...]


def parent_roles(path: str | os.PathLike, fmt: str) -> ParentRoles | None:
    """The roles of the dataset at ``path`` for an import of ``fmt`` extending it; None when it is not a
    readable dataset, or was imported from another format (the import names either in its own words)."""
    from ..errors import GmpError
    from .format import load_dataset
    from .streaming import same_importer

    try:
        meta = load_dataset(path, verify=False).meta  # the header; the arrays are mapped, not read
    except GmpError:
        return None
    source = meta.get("source") if isinstance(meta.get("source"), dict) else {}
    if same_importer(str(source.get("format") or "")) != same_importer(fmt):
        return None
    options = source.get("options") if isinstance(source.get("options"), dict) else {}
    label = options.get("label")
    return ParentRoles(label if isinstance(label, str) and label else None,
                       tuple(str(f.get("name")) for f in meta.get("fields", []) if f.get("kind") == "dense"))


class _Columns(NamedTuple):
    """What :func:`_choose_columns` decided for a csv/Parquet input."""

    choice: ColumnChoice
    proposed: list[str]
    numeric: dict[str, int]  # numeric-looking columns left categorical -> their distinct values in the sample
    num_rows: int  # rows sampled
    problem: str | None
    header: tuple[str, ...] = ()


def _choose_columns(fmt: str, path: Path, given: ColumnChoice, recognised: bool,
                    parent: ParentRoles | None = None) -> _Columns:
    """The columns of a csv/Parquet input, from its first rows (:data:`gmp.datasets.sniff.SAMPLE_ROWS`), or
    where not given and ``parent`` (the dataset it extends) has them, the parent's roles."""
    import dataclasses

    from .sniff import csv_sample, is_number, parquet_sample, positive_label, propose_columns

    if not path.is_file():  # a pipe or device is read once, by the importer: nothing to sample ahead
        check_inputs([path], streams=fmt == "csv", fmt=fmt)  # a directory; a pipe Parquet cannot read
        return _Columns(given, [], {}, 0, None)
    sep = (sep_char(given.sep) or _delimiter(path)) if fmt == "csv" else None
    header, rows = csv_sample(path, sep) if fmt == "csv" else parquet_sample(path)
    if not header:  # empty or unreadable: the importer's own error, not a question about the label
        _check_readable(fmt, path, sep)
        return _Columns(given, [], {}, 0, None)
    # an ignored column is never proposed (as the label, or as dense): `ignore` label with no `label` means
    # "not that one"
    roles = propose_columns([h if h not in given.ignore else "" for h in header], rows)
    proposed: list[str] = []
    label, problem = given.label, None
    positive, threshold = given.label_positive, given.label_threshold
    if label is None and parent is not None and parent.label in header:
        label = parent.label  # the previous day's label column
        proposed.append("label")
    if label is None:
        label = roles.label
        if label is None:
            if roles.candidates:
                problem = (f"which column is the label? {len(roles.candidates)} columns hold only 0 and 1 "
                           f"({', '.join(roles.candidates[:6])}); name one with `label`")
            else:
                problem = ("which column is the label? none is named label, click, target, y or rating and none "
                           "holds only 0 and 1; name it with `label`")
            label = roles.candidates[0] if roles.candidates else "LABEL_COLUMN"
        else:
            proposed.append("label")
    values = roles.distinct(label)
    shown = ", ".join(repr(v) for v in values[:8]) + (f", ... ({len(values):,} values)" if len(values) > 8 else "")
    if problem is None and values and positive is None:
        if not any(is_number(v) for v in values):
            positive = positive_label(values)
            first = next(v for v in roles.values[label] if v)
            problem = (f"label column {label!r} is not a number: {first!r}; the values in its first "
                       f"{roles.num_rows:,} rows are {shown}; name the positive one with `label_positive`")
        elif threshold is None and "label" in proposed and not {float(v) for v in values if is_number(v)} <= {-1, 0, 1}:
            nums = sorted({float(v) for v in values if is_number(v)})
            if label.lower() == "rating" and nums[0] >= 0 and nums[-1] <= 5:
                threshold = 4.0  # star ratings: liked at 4 or 5, as the movielens importer reads them
                proposed.append("label_threshold")
            else:
                problem = (f"label column {label!r} holds numbers other than 0 and 1 ({shown}); say which are "
                           f"positive with `label_threshold` T (label = 1 when value >= T)")
                threshold = nums[len(nums) // 2]
    taken = {label, *given.multi, *given.ignore, *(given.categorical or ())}
    dense = given.dense
    if dense is None and given.categorical is None and (recognised or given.label is None):
        # extending: the parent's dense columns (a column recognition would read as numbers now, e.g. one with a
        # few "nan" cells, was categorical there, and the model trained on the parent takes its inputs)
        dense = parent.dense if parent is not None else tuple(c for c in roles.dense if c not in taken)
        if dense:
            proposed.append("dense")
    numeric = {c: len(roles.distinct(c)) for c in roles.dense if c not in taken and c not in (dense or ())
               and parent is None}  # an extension keeps the parent's roles: no advice to read them as numbers
    choice = dataclasses.replace(given, label=label, label_positive=positive, label_threshold=threshold, dense=dense)
    return _Columns(choice, proposed, numeric, roles.num_rows, problem, tuple(header))


def _check_readable(fmt: str, path: Path, sep: str | None) -> None:
    """Raise the importer's error for a csv/Parquet input whose columns could not be sampled."""
    if fmt == "csv":
        from .csvfmt import read_columns

        read_columns([path], sep, "csv")
    else:
        from .parquet import check_readable

        check_readable(path)


def _delimiter(path: Path) -> str:
    from .sniff import delimiter_of

    return delimiter_of(path)
