"""One entry point for every importer: :func:`import_dataset` and the registry of formats.

``IMPORTERS`` maps a format name to ``(module, function)``; the module is imported
only when its format is used (parquet needs pyarrow). Each importer takes
``(inputs, out, common=CommonOptions, **format_options)`` and returns the written
``dataset.json`` header.

What :func:`import_dataset` adds to the importers:

* **Advice on the wrong format.** When most lines read so far are malformed, the
  file is sniffed (:mod:`gmp.datasets.sniff`) and the error becomes one line naming
  what the file looks like and the command that reads it.
* **A provided test split.** ``test_inputs`` are read after ``inputs``; their
  samples, and only those, form the test set (``split.method = "provided"``).
"""

from __future__ import annotations

import importlib
import os
from pathlib import Path
from typing import Any, Sequence

from ..errors import ImportDataError
from .importers import CommonOptions, MalformedInputError, check_inputs

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
#: formats whose inputs are line-oriented text (sniffed when most lines fail)
TEXT_FORMATS = ("criteo", "avazu", "libsvm", "libfm", "libffm", "csv")
#: the share of malformed lines above which the file is taken for another format
WRONG_FORMAT_SHARE = 0.5


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
    if fmt not in IMPORTERS:
        raise ImportDataError(f"unknown format {fmt!r}; choose one of {', '.join(FORMATS)}.")
    common = common or CommonOptions()
    # the format's importer checks every input again, refusing a pipe where it reads the header first
    tests = check_inputs(test_inputs, streams=True, fmt=fmt) if test_inputs else []
    # realpath, not Path.resolve: a symlink loop raises RuntimeError there (check_inputs names it)
    both = {Path(os.path.realpath(p)) for p in tests} & {Path(os.path.realpath(p)) for p in inputs}
    if both:  # by resolved path: ./a.csv and $PWD/a.csv are one file, and its samples would train and test
        raise ImportDataError(f"{sorted(both)[0]} is given both as an input and as a test input; give it once.")
    if tests and fmt == "movielens":
        raise ImportDataError("test inputs do not apply to movielens (one ratings file with its side files); "
                              "split it by --test-fraction.")
    if common.extend:  # the dataset it extends is an input too: an --out naming it is refused, --overwrite or not
        from .._io import check_output_dir
        from .format import FORMAT

        check_output_dir(out, kind=FORMAT, overwrite=common.overwrite, inputs=[common.extend])
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
        if fmt in TEXT_FORMATS and exc.first and exc.count > WRONG_FORMAT_SHARE * max(1, exc.lines_read):
            from .sniff import advice

            first = exc.first[0]
            hint = advice(Path(first["file"]), fmt, bad=exc.count, lines_read=exc.lines_read,
                          first_reason=f"line {first['line']}: {first['reason']}")
            if hint:
                raise ImportDataError(hint) from None
        raise
