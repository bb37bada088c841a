"""``gmp data``: import raw data, describe a prepared dataset, fetch public data.

    gmp data import criteo train.txt.gz --out data/criteo --min-count 10
    gmp data info data/criteo [--json]
    gmp data stats data/criteo [--compare data/synth] [--json]
    gmp data fetch movielens-100k --out data/ml-100k-raw

The synthetic generator (``gmp data synth``) lives in :mod:`cli.synth` and is
attached to this group when present.
"""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from ._common import console, echo_json, handle_errors
from ._options import options

from gmp.datasets.dispatch import FORMAT_ALIASES, FORMATS

#: largest --hash SIZE
MAX_HASH_BUCKETS = 2**31 - 2

data_app = typer.Typer(
    name="data",
    help="Import raw data into gmp's prepared-dataset format, inspect it, or fetch public samples.",
    no_args_is_help=True,
)


def _split_names(value: Optional[str]) -> list[str]:
    """Comma-separated column names; numbered ranges expand (``I1..I13``)."""
    from gmp.datasets.sniff import expand_names
    from gmp.params import comma_list

    return expand_names(comma_list(value)) if value else []


def parse_hash(specs: list[str]) -> dict[str, int]:
    """``["C3=1000000", ...]`` -> ``{"C3": 1000000}`` with a clear error."""
    from gmp.errors import ImportDataError

    out: dict[str, int] = {}
    for spec in specs:
        name, sep, size = spec.partition("=")
        if not sep or not name.strip() or not size.strip().isdigit() or int(size) < 1:
            raise ImportDataError(f"--hash {spec!r}: expected FIELD=SIZE with a positive integer SIZE, e.g. C3=1000000.")
        if int(size) > MAX_HASH_BUCKETS:
            raise ImportDataError(f"--hash {spec!r}: SIZE must be at most {MAX_HASH_BUCKETS:,} (2^31 - 2), got "
                                  f"{int(size):,}; choose a smaller SIZE.")
        if name.strip() in out:
            raise ImportDataError(f"--hash {spec!r}: field {name.strip()!r} is already hashed into "
                                  f"{out[name.strip()]:,} buckets; give one --hash per field.")
        out[name.strip()] = int(size)
    return out


@data_app.command("import")
@options("data import")
@handle_errors
def import_cmd(args, out, test_inputs, min_count, hash_sizes, max_bad_lines, test_fraction, overwrite, chunk_mb,
               split_hour, rating_threshold, label, label_positive, label_threshold, categorical, multi, multi_sep,
               dense, dense_transform, ignore, sep, as_json, extend) -> None:
    """Import raw data into a prepared dataset.

    FORMAT may be left out: the first input is recognised (criteo, avazu,
    movielens, libsvm/libfm, libffm, csv/tsv with a header, parquet) and the
    command it runs is printed. Formats: criteo (TSV: label, I1-I13,
    C1-C26), avazu (CSV with header), movielens (RecBole .inter/.user/.item
    or classic u.data/u.user/u.item), libsvm/libfm (label idx:val, field =
    token position), libffm (label field:idx:val), csv (generic, with a
    header, any delimiter; tsv is another name for it; the label is a
    column named label/click/target/y/rating or the only 0/1 column,
    numeric columns with many values are --dense, unless
    --label/--cat/--dense/--multi say otherwise; the delimiter is
    recognised), parquet (columns as for csv; needs pyarrow). --test-input
    FILE keeps a provided train/test split. Dense integers are stored as
    log(1+max(x,0)). Inside each field, id 0 is 'missing' and id 1 'rare'
    (--min-count). Malformed lines stop the import unless --max-bad-lines
    allows skipping them. See docs/datasets.md.
    """
    from gmp.api import run_import
    from gmp.datasets.dispatch import ColumnChoice
    from gmp.specs import resolve_import

    fmt, inputs = split_format(args)
    columns = ColumnChoice(
        label=label, label_positive=label_positive, label_threshold=None if label_threshold == 0.5 else label_threshold,
        categorical=tuple(_split_names(categorical)) if categorical is not None else None,
        multi=tuple(_split_names(multi)), multi_sep=multi_sep, dense=tuple(_split_names(dense)) if dense is not None else None,
        dense_transform=dense_transform, ignore=tuple(_split_names(ignore)), sep=sep)
    extra = _common_flags(test_inputs=test_inputs, min_count=min_count, hash_sizes=hash_sizes,
                          max_bad_lines=max_bad_lines, test_fraction=test_fraction, overwrite=overwrite,
                          chunk_mb=chunk_mb, extend=extend)
    spec = resolve_import(fmt, inputs, out, test_inputs=test_inputs, min_count=min_count,
                          hash_sizes=parse_hash(hash_sizes), max_bad_lines=max_bad_lines,
                          test_fraction=test_fraction, overwrite=overwrite, extend=extend,
                          chunk_mb=chunk_mb, split_hour=None if split_hour else False,
                          rating_threshold=None if rating_threshold == 4.0 else rating_threshold, columns=columns,
                          extra_args=extra)
    recipe = spec.recipe
    extra = _format_flags(spec.format, split_hour=split_hour, rating_threshold=rating_threshold, ignore=ignore) + extra
    if recipe.proposed:  # say what was recognised and the command that does the same explicitly
        typer.echo(f"recognised {recipe.description}; running: {recipe.command(inputs, out, extra)}", err=as_json)
    meta = run_import(spec)
    warning = recipe.numeric_warning(meta)
    if warning:
        typer.echo(warning, err=True)
    if as_json:
        echo_json(meta)
        return
    from gmp.wording import plural

    num_fields = sum(1 for f in meta["fields"] if f["kind"] != "dense")
    num_bad, num_blank = meta["num_bad_lines"], meta["source"].get("num_blank_lines", 0)
    skipped = f", {num_bad:,} malformed {plural('line', num_bad)} skipped" if num_bad else ""
    if num_blank:
        skipped += f", {num_blank:,} blank {plural('line', num_blank)} skipped"
    typer.echo(f"imported {meta['num_samples']:,} {plural('sample', meta['num_samples'])} "
               f"({meta['split']['num_test']:,} test), {meta['num_embeddings']:,} "
               f"{plural('embedding', meta['num_embeddings'])} in {num_fields} {plural('field', num_fields)}, "
               f"{meta['num_dense']} dense, label rate {meta['label_rate']:.4f}{skipped} -> {out}")


def split_format(args: list[str]) -> tuple[Optional[str], list[Path]]:
    """``[FORMAT] INPUT...`` -> (format or None, inputs): the first word is the format when it names one and
    an input follows (a lone word naming a format and no file is a missing INPUT)."""
    from gmp.errors import ImportDataError

    if args and (args[0].lower() in FORMATS or args[0].lower() in FORMAT_ALIASES):
        if len(args) > 1:
            word = args[0].lower()
            return FORMAT_ALIASES.get(word, word), [Path(a) for a in args[1:]]
        if not Path(args[0]).exists():
            raise ImportDataError(f"format {args[0]!r} given but no INPUT; pass the file(s) to import after it.")
    if len(args) > 1 and not Path(args[0]).exists() and Path(args[1]).exists():  # a misspelt FORMAT, not a file
        raise ImportDataError(f"unknown format {args[0]!r}; choose one of {', '.join(FORMATS)}, or leave it out to "
                              f"have the input recognised.")
    return None, [Path(a) for a in args]


def _common_flags(*, test_inputs, min_count, hash_sizes, max_bad_lines, test_fraction, overwrite, chunk_mb,
                  extend) -> list[str]:
    """The flags every format takes, as given, for the commands the import prints."""
    import shlex

    out: list[str] = []
    for p in test_inputs:
        out += ["--test-input", shlex.quote(str(p))]
    if min_count != 1:
        out += ["--min-count", str(min_count)]
    for h in hash_sizes:
        out += ["--hash", shlex.quote(h)]
    if max_bad_lines:
        out += ["--max-bad-lines", str(max_bad_lines)]
    if test_fraction != 0.1:
        out += ["--test-fraction", f"{test_fraction:g}"]
    if chunk_mb != 16:
        out += ["--chunk-mb", str(chunk_mb)]
    if extend is not None:
        out += ["--extend", shlex.quote(str(extend))]
    if overwrite:
        out += ["--overwrite"]
    return out


def _format_flags(fmt: str, *, split_hour: bool, rating_threshold: float, ignore: Optional[str]) -> list[str]:
    """avazu's and movielens's own flags, as given (csv/parquet's are the recipe's columns)."""
    import shlex

    if fmt == "avazu" and not split_hour:
        return ["--no-split-hour"]
    if fmt == "movielens":
        return ((["--rating-threshold", f"{rating_threshold:g}"] if rating_threshold != 4.0 else [])
                + (["--ignore", shlex.quote(ignore)] if ignore is not None else []))
    return []


@data_app.command("info")
@handle_errors
def info_cmd(
    path: Path = typer.Argument(..., metavar="DIR", help="A prepared dataset directory."),
    as_json: bool = typer.Option(False, "--json", help="Print one JSON object."),
) -> None:
    """Counts, per-field cardinalities and skew (share of accesses to the top 1% of embeddings, max degree)."""
    from gmp.api import dataset_info

    info = dataset_info(path)
    if as_json:
        echo_json(info)
        return
    from rich.table import Table

    g = info["graph"]
    src = info["source"]
    con = console()
    con.print(f"[bold]{path}[/bold]  (source: {src.get('format', '?')}, sha256 {info['sha256'][:12]})")
    con.print(f"samples {info['num_samples']:,} (train {info['num_train']:,}, test {info['num_test']:,}), "
              f"embeddings {info['num_embeddings']:,} ({g['num_active_embeddings']:,} used), edges {info['num_edges']:,}, "
              f"dense {info['num_dense']}, label rate {info['label_rate']:.4f}, bad lines skipped {info['num_bad_lines']:,}")
    con.print(f"skew: top 1% of used embeddings get {g['top1pct_access_share']:.1%} of accesses "
              f"(top 0.1%: {g['top01pct_access_share']:.1%}); max embedding degree {g['max_embedding_degree']:,}; "
              f"sample degree mean {g['mean_sample_degree']:.2f}, max {g['max_sample_degree']}")
    table = Table("field", "kind", "values", "used", "max degree", "top 1% share", "missing", "rare")
    dense_names = [f["name"] for f in info["fields"] if f["kind"] == "dense"]
    if dense_names:
        con.print(f"dense columns: {', '.join(dense_names)}")
    for f in info["fields"]:
        if f["kind"] == "dense":
            continue
        kind = f["kind"] + (f" (hash {f['hash_buckets']})" if f["hash_buckets"] else "")
        table.add_row(f["name"], kind, f"{f['num_values']:,}", f"{f['num_active']:,}", f"{f['max_degree']:,}",
                      f"{f['top1pct_access_share']:.1%}", "" if f["missing_accesses"] is None else f"{f['missing_accesses']:,}",
                      "" if f["rare_accesses"] is None else f"{f['rare_accesses']:,}")
    con.print(table)


@data_app.command("fetch")
@handle_errors
def fetch_cmd(
    name: str = typer.Argument(..., metavar="NAME", help="Data set to fetch: movielens-100k."),
    out: Path = typer.Option(Path("data/ml-100k-raw"), "--out", "-o", help="Directory for the raw files."),
    overwrite: bool = typer.Option(False, "--overwrite", help="Replace files already there."),
    wheel: Optional[Path] = typer.Option(None, "--wheel", help="Use this recbole-1.2.1 wheel instead of downloading."),
) -> None:
    """Fetch a public data set that may not be redistributed (MovieLens-100K via the recbole wheel on PyPI)."""
    from gmp.datasets.fetch import fetch

    files = fetch(name, out, overwrite=overwrite, wheel=wheel)
    typer.echo(f"fetched {name}: {', '.join(str(f) for f in files)}")
    typer.echo(f"next: gmp data import movielens {out} --out <DIR>")


@data_app.command("stats")
@handle_errors
def stats_cmd(
    path: Path = typer.Argument(..., metavar="DATASET", help="A prepared dataset directory."),
    as_json: bool = typer.Option(False, "--json", help="Print one JSON object (with --compare: both reports)."),
    batch_size: int = typer.Option(1024, "--batch-size",
                                   help="Batch size for row reuse between consecutive batches (8 workers x 128)."),
    compare: Optional[Path] = typer.Option(None, "--compare", metavar="OTHER",
                                           help="A second dataset: print both side by side."),
    seed: int = typer.Option(0, "--seed", help="Seed of the shuffled controls, bootstrap and shuffled order."),
    windows: str = typer.Option("100,200,500,1000", "--windows", metavar="N,N,...",
                                help="Nested windows (first N samples) for the excess-MI and distinct-value curves."),
) -> None:
    """Does this data behave like real CTR data? Per field: values used, Zipf exponent, top-1% share;
    between fields: mutual information above a shuffled control (first 1,000 samples, fields with
    2-500 values, bootstrap sd), co-occurrence clustering; across batches: row reuse. See docs/synth.md.
    """
    from gmp.datasets.format import load_dataset
    from gmp.datasets.stats import StatsOptions, compare_stats, dataset_stats, dropped_windows_note

    from gmp.errors import DatasetError
    from gmp.wording import plural

    try:
        wins = tuple(int(x) for x in windows.split(",") if x.strip())
    except ValueError:
        raise DatasetError(f"stats: windows must be comma-separated sample counts, e.g. 100,200,500,1000; "
                           f"got {windows!r}.") from None
    opts = StatsOptions(batch_size=batch_size, seed=seed, windows=wins)
    datasets = [load_dataset(p) for p in ([path] if compare is None else [path, compare])]
    if opts.windows != StatsOptions().windows:  # windows asked for: at least one must fit each dataset
        for ds in datasets:
            if min(opts.windows) > ds.num_samples:
                raise DatasetError(f"stats: no window of --windows {windows} fits {ds.path}, which has "
                                   f"{ds.num_samples:,} {plural('sample', ds.num_samples)}; give windows of at "
                                   f"most {ds.num_samples:,} samples.")
    a = dataset_stats(datasets[0], opts)
    b = dataset_stats(datasets[1], opts) if compare is not None else None
    notes = [n for n in (dropped_windows_note(a), None if b is None else dropped_windows_note(b)) if n]
    if as_json:
        for note in notes:  # stderr: stdout stays one JSON object
            typer.echo(note, err=True)
        echo_json(a.to_json() if b is None else {"a": a.to_json(), "b": b.to_json()})
        return
    from rich.table import Table

    con = console()
    if b is not None:
        table = Table("statistic", str(path), str(compare), "ratio")
        for row in compare_stats(a, b):
            table.add_row(row.name, _fmt(row.a), _fmt(row.b), _fmt(row.ratio))
        con.print(table)
        for note in notes:
            typer.echo(note)
        return
    con.print(f"[bold]{path}[/bold]  {a.num_samples:,} {plural('sample', a.num_samples)}, {len(a.fields)} "
              f"categorical {plural('field', len(a.fields))}")
    table = Table("field", "values", "used", "zipf exponent", "top 1% share")
    for f in a.fields:
        table.add_row(f.name, f"{f.num_values:,}", f"{f.values_used:,}", _fmt(f.zipf_exponent),
                      f"{f.top1pct_share:.1%}")
    con.print(table)
    con.print(f"mutual information above shuffled control (first {a.mi.num_samples:,} samples, "
              f"{len(a.mi.fields)} fields with 2-500 values): mean {_fmt(a.mi.mean_bits)} bits "
              f"(bootstrap sd {_fmt(a.mi.bootstrap_sd)}; raw {_fmt(a.mi.raw_mean_bits)}, control "
              f"{_fmt(a.mi.control_mean_bits)})")
    con.print(f"co-occurrence clustering (first {a.clustering.num_samples:,} samples): "
              f"{_fmt(a.clustering.clustering)} (shuffled control {_fmt(a.clustering.shuffled)})")
    con.print(f"row reuse between consecutive batches of {a.reuse.batch_size:,}: file order "
              f"{_fmt(a.reuse.file_order)}, shuffled {_fmt(a.reuse.shuffled)} ({a.reuse.num_batches} batches)")
    g = a.growth
    if g is not None and g.windows:
        con.print(f"across windows (first N samples; MI on the {len(g.fields)} fields with 2-500 values in the "
                  f"largest window):")
        table = Table("first N", "MI above control, bits", "distinct values (sum over fields)")
        for k, w in enumerate(g.windows):
            table.add_row(f"{w:,}", _fmt(g.mi_bits[k]), f"{int(g.distinct[k].sum()):,}")
        con.print(table)
    for note in notes:  # after the windows table, or where it would be
        typer.echo(note)


def _fmt(x: float) -> str:
    import math

    if isinstance(x, int):
        return f"{x:,}"
    return "-" if x is None or math.isnan(x) else f"{x:.3f}"


from cli.synth import register as _register_synth  # noqa: E402 - the synthetic generator's command module

_register_synth(data_app)


def register(app: typer.Typer) -> None:
    """Add the ``data`` group to the root app."""
    app.add_typer(data_app, name="data")
