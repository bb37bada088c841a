"""The report's tables as plain ``(headers, rows)`` of strings.

Markdown, HTML and the CLI's rich tables all render these, so the numbers
and their formatting are decided in one place.
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

from ..params import option_name
from ..wording import plural

Table = tuple[list[str], list[list[str]]]

METRIC_LABELS = {
    "remote_accesses": "remote accesses (edges)",
    "remote_accesses_weighted": "remote accesses, topology-weighted",
    "epoch_unique_remote": "epoch unique remote rows",
    "batch_remote_reads": "batch remote reads (rows pulled / epoch)",
    "batch_remote_pushes": "batch remote pushes (gradients / epoch)",
}


def fmt_int(v: Any) -> str:
    return "—" if v is None else f"{int(v):,}"


def fmt_num(v: Any, digits: int = 3) -> str:
    if v is None:
        return "—"
    if isinstance(v, bool):
        return str(v)
    if isinstance(v, int):
        return f"{v:,}"
    if isinstance(v, float):
        if v.is_integer() and abs(v) < 1e15:
            return f"{int(v):,}"
        return f"{v:,.{digits}f}" if abs(v) >= 1e-3 or v == 0 else f"{v:.2e}"
    return str(v)


def fmt_pct(v: Any) -> str:
    return "—" if v is None else f"{100 * float(v):.1f}%"


def fmt_bytes(v: Any) -> str:
    if v is None:
        return "—"
    v = float(v)
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if abs(v) >= scale:
            return f"{v / scale:.2f} {unit}"
    return f"{v:.0f} B"


def fmt_seconds(v: Any) -> str:
    return "—" if v is None else f"{float(v):.2f} s"


def fmt_ratio(v: Any) -> str:
    return "—" if v is None else f"{float(v):.3f}"


def metrics_table(metrics: Mapping[str, Any]) -> Table:
    red = metrics.get("reduction_vs_random") or {}
    ref = metrics.get("reference") or {}
    row_bytes = metrics.get("bytes_per_row")
    rows = []
    for key, name in METRIC_LABELS.items():
        if key not in metrics:
            continue
        v = metrics[key]
        if key == "remote_accesses_weighted" and v == metrics.get("remote_accesses") \
                and ref.get(key) == ref.get("remote_accesses"):
            continue  # every cost is 1 (flat topology): the weighted row would repeat the one above
        b = fmt_bytes(v * row_bytes) if (row_bytes and key != "remote_accesses_weighted") else "—"
        rows.append([name, fmt_num(v), b, fmt_change(red.get(key)), fmt_num(ref.get(key))])
    return ["metric", "value", "bytes", "vs random", "random"], rows


#: what the metrics' ``num_secondaries`` counts (gmp.metrics.per_worker: rows the data reads only)
SECONDARIES_LABEL = "secondaries (on rows the data reads)"


def summary_table(metrics: Mapping[str, Any], *, placement_secondaries: int | None = None) -> Table:
    """``placement_secondaries``: the placement's own total (manifest.json's ``num_secondaries``, every
    row); shown as a second row when it differs from the metrics' count, which leaves out rows the data
    never reads (an old manifest's rows under ``--from-manifest``)."""
    bal = metrics.get("balance") or {}
    counted = metrics.get("num_secondaries")
    rows = [
        ["replication factor", fmt_ratio(metrics.get("replication_factor"))],
        [SECONDARIES_LABEL, fmt_int(counted)],
    ]
    if placement_secondaries is not None and counted is not None and int(placement_secondaries) != int(counted):
        rows.append(["secondaries in the placement (every row, as manifest.json counts)",
                     fmt_int(placement_secondaries)])
    rows += [
        ["active embeddings", fmt_int(metrics.get("num_active_embeddings"))],
    ]
    rows += [[f"balance: {k.replace('_', ' ')} (max/mean)", fmt_ratio(v)] for k, v in bal.items()]
    train = metrics.get("train")
    if train:
        n = fmt_int(train.get("num_train"))
        rows += [[f"training range (first {n} samples): {k.replace('_', ' ')}", fmt_int(train.get(k))]
                 for k in ("batch_remote_reads", "batch_remote_pushes")]
    rows += [
        ["partition time", fmt_seconds(metrics.get("partition_seconds"))],
        ["peak RSS", fmt_bytes(metrics.get("peak_rss_bytes"))],
    ]
    return ["quantity", "value"], rows


PER_WORKER_COLUMNS = (
    ("samples", "samples"), ("edges", "edges"), ("primaries", "primaries"), ("secondaries", "secondaries"),
    ("rows_held", "rows held"), ("remote_accesses", "remote accesses"),
    ("epoch_unique_remote", "epoch unique remote"), ("batch_remote_reads", "batch reads"),
    ("batch_remote_pushes", "batch pushes"), ("traffic_served", "rows served"),
)


def per_worker_table(metrics: Mapping[str, Any]) -> Table:
    loads = metrics.get("per_worker") or {}
    cols = [(k, name) for k, name in PER_WORKER_COLUMNS if k in loads]
    if not cols:
        return ["worker"], []
    n = len(loads[cols[0][0]])
    rows = [[str(w)] + [fmt_int(loads[k][w]) for k, _ in cols] for w in range(n)]
    # without secondaries these repeat each other by construction
    return merge_identical_columns((["worker"] + [name for _, name in cols], rows), keep=("worker",),
                                   only=(("primaries", "rows held"), ("batch reads", "batch pushes")))


def _flatten(obj: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in obj.items():
        if isinstance(v, Mapping):
            out.update(_flatten(v, f"{prefix}{k}."))
        elif isinstance(v, (list, tuple)):
            continue  # per-worker lists and matrices do not fit a row
        else:
            out[f"{prefix}{k}"] = v
    return out


#: readable headers of the convergence log's keys (hybrid's per-round log, see gmp.partition.hybrid)
CONVERGENCE_LABELS = {
    "round": "round",
    "level": "level",
    "objective": "objective (Eq. 3)",
    "comm_weighted": "weighted comm",
    "expected_remote_reads": "expected batch reads",
    "remote_accesses": "remote accesses",
    "epoch_unique_remote": "epoch unique remote",
    "sample_imbalance": "sample imbalance",
    "primary_imbalance": "primary imbalance",
    "traffic_imbalance": "traffic imbalance",
    "moved_samples": "moved samples",
    "moved_embeddings": "moved rows",
    "num_secondaries": "secondaries",
    "seconds": "time (s)",
}


def label(key: str) -> str:
    """A readable column header for a snake_case (or dotted) key."""
    return CONVERGENCE_LABELS.get(key) or key.replace(".", " ").replace("_", " ")


def convergence_table(rounds: Sequence[Mapping[str, Any]]) -> Table:
    """One row per round; columns are whatever the partitioner logged (round first, seconds last).

    The ``level`` column is dropped when every sweep ran on the same level (a
    flat topology; hierarchical hybrid runs machine-level then worker-level).

    Headers are readable (:data:`CONVERGENCE_LABELS`, else the key with spaces);
    a column whose cells equal an earlier column's in every row is merged into
    it (its header becomes ``"a = b"``), so no two columns say the same thing.
    """
    flat = [_flatten(r) for r in rounds]
    keys: list[str] = []
    for r in flat:
        for k in r:
            if k not in keys:
                keys.append(k)
    first = [k for k in ("round", "level", "objective") if k in keys]
    last = [k for k in ("seconds",) if k in keys]
    keys = first + [k for k in keys if k not in first and k not in last] + last
    headers = [label(k) for k in keys]
    rows = [[_cell(k, r.get(k), i) for k in keys] for i, r in enumerate(flat)]
    for group, name in COMBINED_COLUMNS:  # related columns share one cell, so the table fits a page
        if all(k in keys for k in group):
            at = [keys.index(k) for k in group]
            headers[at[0]] = name
            for row in rows:
                cells = [row[j] for j in at]
                row[at[0]] = "—" if all(c == "—" for c in cells) else "/".join(cells)
            keys = [k for j, k in enumerate(keys) if j not in at[1:]]
            headers = [h for j, h in enumerate(headers) if j not in at[1:]]
            rows = [[c for j, c in enumerate(row) if j not in at[1:]] for row in rows]
    if "level" in keys:  # one level for every sweep (a flat topology): the column says nothing
        j = keys.index("level")
        if len({r[j] for r, f in zip(rows, flat) if f.get("level") is not None and
                str(f.get("round")) not in ("2D", "final")}) <= 1:
            headers, rows = headers[:j] + headers[j + 1:], [r[:j] + r[j + 1:] for r in rows]
    return merge_identical_columns((headers, rows), keep=("round", "level"))


#: groups of convergence-log keys shown in one column (cells joined by " / ")
COMBINED_COLUMNS = (
    (("sample_imbalance", "primary_imbalance", "traffic_imbalance"), "imbalance: samples/rows/traffic"),
    (("moved_samples", "moved_embeddings"), "moved: samples/rows"),
)


def merge_identical_columns(table: Table, *, keep: Sequence[str] = (),
                            only: Sequence[tuple[str, str]] | None = None) -> Table:
    """Merge every column that repeats an earlier column into that column.

    Two columns repeat each other when they agree on at least two rows where
    both have a value and never disagree ("—" = no value; the merged column
    takes whichever value a row has). The kept column's header becomes
    ``"a = b"`` (e.g. ``"batch reads = batch pushes"`` for a placement without
    secondaries), so no two columns of a table say the same thing. Columns
    named in ``keep`` are never merged; with ``only`` just those (earlier,
    later) header pairs may merge (columns that repeat by construction, not by
    coincidence on a small table).
    """
    headers, rows = table
    columns = [[r[j] for r in rows] for j in range(len(headers))]
    out_headers: list[str] = []
    kept: list[list[str]] = []
    for h, col in zip(headers, columns):
        twin = None
        if h not in keep:
            twin = next((j for j, c in enumerate(kept) if out_headers[j] not in keep and _same(c, col)
                         and (only is None or (out_headers[j].split(" = ")[-1], h) in only)), None)
        if twin is not None:
            out_headers[twin] = f"{out_headers[twin]} = {h}"
            kept[twin] = [b if a == "—" else a for a, b in zip(kept[twin], col)]
            continue
        out_headers.append(h)
        kept.append(col)
    return out_headers, [list(r) for r in zip(*kept)] if rows else []


def _same(a: Sequence[str], b: Sequence[str]) -> bool:
    both = [(x, y) for x, y in zip(a, b) if x != "—" and y != "—"]
    return len(both) >= min(2, len(a)) and all(x == y for x, y in both)


def _cell(key: str, value: Any, index: int) -> str:
    if key == "round":
        return str(index + 1 if value is None else value)
    if value is None or isinstance(value, (bool, str)):
        return fmt_num(value)
    if key.endswith("imbalance"):
        return fmt_ratio(value)
    if key == "seconds":
        return f"{float(value):.3f}"
    if abs(value) >= 1e6:
        return fmt_short(value)
    if isinstance(value, float) and abs(value) >= 100:
        return f"{value:,.0f}"
    return fmt_num(value)


def fmt_short(v: Any) -> str:
    """``12345678`` -> ``"12.35M"``: large counts in a width that fits a table column."""
    if v is None:
        return "—"
    v = float(v)
    for unit, scale in (("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if abs(v) >= scale:
            return f"{v / scale:.2f}{unit}"
    return f"{v:,.0f}" if float(v).is_integer() else f"{v:.3f}"


def convergence_with_final(report: Mapping[str, Any]) -> list[dict[str, Any]] | None:
    """The convergence log plus a last row with the report's exact numbers.

    The per-round log holds the partitioner's own estimates (hybrid: the
    soft-count ``expected_remote_reads`` before replication); its ``2D`` row
    (added by :func:`gmp.report.build_report`) is the estimate after the
    replication step, and the ``final`` row is what the report measured, so
    the table ends on the headline's number.
    """
    rounds = report.get("convergence")
    if not rounds:
        return None
    metrics = report.get("metrics") or {}
    final: dict[str, Any] = {"round": "final", "level": "measured"}
    keys = {k for r in rounds for k in r}
    if "expected_remote_reads" in keys and metrics.get("batch_remote_reads") is not None:
        final["expected_remote_reads"] = metrics["batch_remote_reads"]
    for k in ("remote_accesses", "epoch_unique_remote"):
        if k in keys and metrics.get(k) is not None:
            final[k] = metrics[k]
    if len(final) == 2:
        return list(rounds)
    return list(rounds) + [final]


HEADLINE_METRICS = (("batch_remote_reads", "batch reads"), ("batch_remote_pushes", "batch pushes"),
                    ("epoch_unique_remote", "epoch-unique rows"), ("remote_accesses", "remote accesses"))


def fmt_change(reduction: Any) -> str:
    """A reduction vs random (0.779) as the signed change people read: ``"-77.9%"`` (``"+5.0%"`` = more)."""
    if reduction is None:
        return "—"
    change = -100.0 * float(reduction)
    return f"{change:+.1f}%".replace("+0.0%", "0.0%").replace("-0.0%", "0.0%")


def workers_phrase(num_workers: int, topology: Any) -> str:
    """``"4 workers (flat: every remote row costs 1)"``, ``"16 workers (2 machines x 8, a row on another
    machine costs more)"``: the worker count and what its topology means, not its bare name (``"4 workers (4)"``)."""
    name = str(topology.get("name") if isinstance(topology, Mapping) else topology)
    if name == str(num_workers):
        return f"{num_workers} workers (flat: every remote row costs 1)"
    machines, x, per = name.partition("x")
    if x and machines.isdigit() and per.isdigit():
        return (f"{num_workers} workers ({machines} {plural('machine', int(machines))} x {per}, a row on another "
                f"machine costs more)")
    return f"{num_workers} workers (topology {name})"


def subject(report: Mapping[str, Any]) -> str:
    """``"hybrid on criteo-1m, 8 workers"``: what a report (and each of its figures) is about."""
    settings = report.get("settings") or {}
    name = report.get("dataset_name") or settings.get("dataset_name")
    return f"{settings.get('method')}" + (f" on {name}" if name else "") + f", {settings.get('num_workers')} workers"


def headline(report: Mapping[str, Any]) -> tuple[str, str]:
    """``(title, summary)`` of a report.

    Title: the change in rows moved per batch over an epoch, reads and pushes together (each row is
    ``bytes_per_row`` either way, so this is the change in bytes):
    ``"hybrid on criteo-1m, 8 workers: -73.7% bytes moved vs random (reads + pushes)"``;
    summary: the reads and the pushes beneath it with their bytes, then the other reductions and the
    replication factor. Random's counts are the report's ``reference`` or, in a report made from
    manifest.json's summary, recovered from the changes (:func:`reference_total`), so both head alike. A
    report without pushes (older ones) heads on whichever main metric it has.
    """
    metrics = report.get("metrics") or {}
    red = metrics.get("reduction_vs_random") or {}
    where = subject(report)
    parts = ("batch_remote_reads", "batch_remote_pushes")
    rb = metrics.get("bytes_per_row")
    total_ref = reference_total(metrics, parts)
    if total_ref is not None:
        total = sum(float(metrics[k]) for k in parts)
        change = fmt_change(1.0 - total / total_ref if total_ref else 0.0)
        title = f"{where}: {change} bytes moved vs random (reads + pushes)"

        def one(k: str, what: str) -> str:
            size = f" ({fmt_bytes(float(metrics[k]) * rb)})" if rb else ""
            return f"{what} {fmt_change(red.get(k))}{size}"

        beneath = [one("batch_remote_reads", "batch reads"), one("batch_remote_pushes", "batch pushes")]
        rest = [(k, w) for k, w in HEADLINE_METRICS if k not in parts]
    else:
        key, what = next(((k, w) for k, w in HEADLINE_METRICS if red.get(k) is not None), (None, None))
        if key is None:
            return f"Placement report: {where}", ""
        title = f"{where}: {fmt_change(red[key])} {what} vs random"
        beneath = []
        rest = [(k, w) for k, w in HEADLINE_METRICS if k != key]
    others = beneath + [f"{w} {fmt_change(red[k])}" for k, w in rest if red.get(k) is not None]
    rf = metrics.get("replication_factor")
    tail = f"; replication factor {fmt_ratio(rf)}" if rf is not None else ""
    bs = metrics.get("batch_size")
    summary = (f"Versus random on the same graph and seed: {', '.join(others)}{tail}"
               + (f" (batch {bs} per worker, per epoch)." if bs else "."))
    return title, summary


def reference_total(metrics: Mapping[str, Any], keys: tuple[str, ...]) -> float | None:
    """The random reference's total of ``keys``: its recorded values (``metrics["reference"]``, report.json),
    else each recovered from the metric and its change against random (``value / (1 - change)``: manifest.json's
    summary, which keeps the changes only), so a report without report.json heads on the same quantity; None
    when a value is unknown, or its reference is (a change of -100%: the metric is 0, whatever random's was)."""
    ref = metrics.get("reference") or {}
    red = metrics.get("reduction_vs_random") or {}
    total = 0.0
    for k in keys:
        value = metrics.get(k)
        if value is None:
            return None
        if ref.get(k) is not None:
            total += float(ref[k])
        elif red.get(k) is not None and float(red[k]) != 1.0:
            total += float(value) / (1.0 - float(red[k]))
        else:
            return None
    return total


def traffic_summary(metrics: Mapping[str, Any]) -> str:
    """``"12.05k rows/epoch (753.38 KiB), -76.3% vs random (reads -77.5%, pushes -75.1%)"``: the rows a
    training epoch moves, batch reads and pushes together, and the change against random: the headline's
    quantity in a phrase short enough for the commands' one-line summaries."""
    reads, pushes = metrics.get("batch_remote_reads"), metrics.get("batch_remote_pushes")
    if reads is None or pushes is None:
        return f"{fmt_short(reads)} batch reads/epoch"
    red = metrics.get("reduction_vs_random") or {}
    ref = metrics.get("reference") or {}
    total = float(reads) + float(pushes)
    rb = metrics.get("bytes_per_row")
    out = f"{fmt_short(total)} rows/epoch" + (f" ({fmt_bytes(total * rb)})" if rb else "")
    if ref.get("batch_remote_reads") is not None and ref.get("batch_remote_pushes") is not None:
        total_ref = float(ref["batch_remote_reads"]) + float(ref["batch_remote_pushes"])
        change = fmt_change(1.0 - total / total_ref if total_ref else 0.0)
        out += (f", {change} vs random (reads {fmt_change(red.get('batch_remote_reads'))}, "
                f"pushes {fmt_change(red.get('batch_remote_pushes'))})")
    return out


def graph_table(graph: Mapping[str, Any]) -> Table:
    return ["quantity", "value"], [[k.replace("num_", "").replace("_", " "), fmt_num(v)] for k, v in graph.items()]


def settings_table(settings: Mapping[str, Any]) -> Table:
    topo = settings.get("topology") or {}
    rows = [
        ["dataset", str(settings.get("dataset_name") or "—")],
        ["method", str(settings.get("method"))],
        ["seed", str(settings.get("seed"))],
        ["workers", str(settings.get("num_workers"))],
        ["topology", str(topo.get("name"))],
        ["batch size (per worker)", fmt_int(settings.get("batch_size"))],
        ["embedding dim", fmt_int(settings.get("embedding_dim"))],
    ]
    for k, v in (settings.get("options") or {}).items():
        if v is not None:  # unset options take the method's default
            rows.append([f"option {option_name(k)}", fmt_num(v) if not isinstance(v, (list, dict)) else str(v)])
    if settings.get("dataset_sha256"):
        rows.append(["dataset sha256", str(settings["dataset_sha256"])[:16] + "…"])
    return ["setting", "value"], rows


def incremental_table(c: Mapping[str, Any]) -> Table:
    """A ``--from-manifest`` placement's comparison (the report's ``incremental`` object): reads, rows and
    bytes moved and seconds of the new data placed, this placement and the full re-partition."""
    reads = c["batch_remote_reads"]
    rows = []
    if c.get("max_moved_rows") is None:  # no budget: this placement *is* the new data placed
        name = "place-new"
    else:
        name = f"incremental (budget {c['max_moved_rows']:,} rows)"
        rows.append(["no re-partition (new data placed)", fmt_int(reads["no_repartition"]), "0", "0", ""])
    rows.append([name, fmt_int(reads["this"]), fmt_int(c["moved_rows"]["total"]),
                 fmt_int(c["moved_rows"]["bytes"]), fmt_seconds(c["seconds"]["this"])])
    if reads.get("full_repartition") is not None:
        fm = c["full_repartition_moved_rows"]
        rows.append(["full re-partition (hybrid)", fmt_int(reads["full_repartition"]), fmt_int(fm["total"]),
                     fmt_int(fm["bytes"]), fmt_seconds(c["seconds"]["full_repartition"])])
    return ["placement", "batch_remote_reads", "rows moved", "bytes moved", "seconds"], rows


def curve_table(c: Mapping[str, Any]) -> Table | None:
    """Target mode's budget curve (``comparison.curve``, ``gmp partition --from-manifest --compare-full``):
    reads against rows moved at each budget of the ladder, and the candidate kept; None without one.
    "vs full" is against the target's reads (the full re-partition of the same samples); "reads + moved" adds
    the rows moved to one epoch's reads (the rows a day trained one epoch sends: on sparse days the full
    re-partition pays in moves what it saves in reads, docs/incremental.md), and the last line is the full
    re-partition itself (its rows moved after renaming its workers)."""
    curve = c.get("curve")
    if not curve:
        return None
    ref = ((c.get("candidates") or {}).get("full") or {}).get("batch_remote_reads")
    rows = []
    for p in curve:
        ratio = f"{p['batch_remote_reads'] / ref:.3f}x" if ref else "-"  # a full re-partition that reads nothing
        rows.append([_budget_label(p), fmt_int(p["budget"]), fmt_int(p["batch_remote_reads"]), ratio,
                     fmt_int(p["rows"]), fmt_int(p["batch_remote_reads"] + p["rows"]), str(p["kept"])])
    full = _full_line(c)
    if full is not None:
        reads, moved = full
        rows.append(["full re-partition", "-", fmt_int(reads), f"{reads / ref:.3f}x" if ref else "-",
                     fmt_int(moved), fmt_int(reads + moved), "-"])
    return ["budget", "rows allowed", "batch_remote_reads", "vs full", "rows moved", "reads + moved", "kept"], rows


def curve_choice(c: Mapping[str, Any]) -> str:
    """The line under :func:`curve_table`: the curve's budget that reads least and the one whose reads plus
    rows moved are least (what a day trained one epoch sends), the smaller budget on a tie; the full
    re-partition where it sends less."""
    curve = c["curve"]
    read = min(curve, key=lambda p: (p["batch_remote_reads"], p["budget"]))
    sent = min(curve, key=lambda p: (p["batch_remote_reads"] + p["rows"], p["budget"]))
    total = sent["batch_remote_reads"] + sent["rows"]
    name = _budget_label(sent, rows=True)
    full = _full_line(c)
    if full is not None and sum(full) < total:
        name, total = "the full re-partition", sum(full)
    return (f"least read: {_budget_label(read, rows=True)} ({read['batch_remote_reads']:,}); least sent by a day "
            f"trained one epoch (reads + rows moved): {name} ({total:,} rows)")


def _budget_label(p: Mapping[str, Any], *, rows: bool = False) -> str:
    """A curve point's budget: its percent of the used rows, or "this budget" (off the ladder)."""
    if p.get("percent") is not None:
        return f"{p['percent']:g}%"
    return f"this budget ({p['budget']:,} rows)" if rows else "this budget"


def _full_line(c: Mapping[str, Any]) -> tuple[int, int] | None:
    """``(reads, rows moved)`` of the comparison's full re-partition, None where it was not run."""
    reads = (c.get("batch_remote_reads") or {}).get("full_repartition")
    moved = (c.get("full_repartition_moved_rows") or {}).get("total")
    return None if reads is None or moved is None else (int(reads), int(moved))


#: the title of :func:`curve_table` wherever it is shown
CURVE_TITLE = "reads against rows moved by budget (one full re-partition run)"


def incremental_note(c: Mapping[str, Any]) -> str:
    """One line under :func:`incremental_table`: the old manifest, the widths and the created rows."""
    gen = c.get("generations")
    lineage = ("the dataset it was made for" if gen == 0 else
               f"{gen} {plural('generation', gen)} after its dataset" if gen else
               "not known to descend from its dataset (ids taken as the same rows)")
    return (f"Placed on {c['old_manifest']} (placement {str(c.get('old_placement_sha256'))[:12]}; the new data is "
            f"{lineage}); batch {c['batch_size']}, rows of {c['embedding_dim']} float32; "
            f"{c.get('created_rows', 0):,} old ids no earlier data read were created, not moved.")
