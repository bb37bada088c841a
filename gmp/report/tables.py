"""The report's tables as plain ``(headers, rows)`` of strings.

Markdown, HTML and the CLI's rich tables all render these, so the numbers
and their formatting are decided in one place.
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

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
    for key, label in METRIC_LABELS.items():
        if key not in metrics:
            continue
        v = metrics[key]
        b = fmt_bytes(v * row_bytes) if (row_bytes and key != "remote_accesses_weighted") else "—"
        rows.append([label, fmt_num(v), b, fmt_pct(red.get(key)), fmt_num(ref.get(key))])
    return ["metric", "value", "bytes", "reduction vs random", "random"], rows


def summary_table(metrics: Mapping[str, Any]) -> Table:
    bal = metrics.get("balance") or {}
    rows = [
        ["replication factor", fmt_ratio(metrics.get("replication_factor"))],
        ["secondaries", fmt_int(metrics.get("num_secondaries"))],
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
    cols = [(k, label) for k, label in PER_WORKER_COLUMNS if k in loads]
    if not cols:
        return ["worker"], []
    n = len(loads[cols[0][0]])
    rows = [[str(w)] + [fmt_int(loads[k][w]) for k, _ in cols] for w in range(n)]
    return ["worker"] + [label for _, label in cols], rows


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


def convergence_table(rounds: Sequence[Mapping[str, Any]]) -> Table:
    """One row per round; columns are whatever the partitioner logged (round first, seconds last)."""
    flat = [_flatten(r) for r in rounds]
    keys: list[str] = []
    for r in flat:
        for k in r:
            if k not in keys:
                keys.append(k)
    first = [k for k in ("round", "objective") if k in keys]
    last = [k for k in ("seconds",) if k in keys]
    keys = first + [k for k in keys if k not in first and k not in last] + last
    rows = [[fmt_num(r.get(k)) if k != "round" else str(r.get(k, i + 1)) for k in keys] for i, r in enumerate(flat)]
    return keys, rows


def settings_table(settings: Mapping[str, Any]) -> Table:
    topo = settings.get("topology") or {}
    rows = [
        ["method", str(settings.get("method"))],
        ["seed", str(settings.get("seed"))],
        ["workers", str(settings.get("num_workers"))],
        ["topology", str(topo.get("name"))],
        ["batch size (per worker)", fmt_int(settings.get("batch_size"))],
        ["embedding dim", fmt_int(settings.get("embedding_dim"))],
    ]
    for k, v in (settings.get("options") or {}).items():
        rows.append([f"option {k}", fmt_num(v) if not isinstance(v, (list, dict)) else str(v)])
    if settings.get("dataset_sha256"):
        rows.append(["dataset sha256", str(settings["dataset_sha256"])[:16] + "…"])
    return ["setting", "value"], rows
