"""Importer for the Avazu click-through CSV (Kaggle 2014), optionally gzip.

The first line is the header; columns are found by name::

    id,click,hour,C1,banner_pos,site_id,site_domain,site_category,app_id,app_domain,app_category,device_id,device_ip,device_model,device_type,device_conn_type,C14,C15,C16,C17,C18,C19,C20,C21
    1000009418151094273,0,14102100,1005,0,1fbe01fe,f3845767,28905ebd,ecad2386,7801e8d9,07d7df22,a99f214a,ddd2926e,44956a24,1,2,15706,320,50,1722,0,35,-1,79

* ``id`` is a row identifier, not a feature: it is ignored.
* ``click`` (0/1) is the label. (The competition's test file has no
  ``click`` column and cannot be imported.)
* ``hour`` is ``YYMMDDHH``. By default (``--split-hour``, the default) it
  becomes two categorical fields, ``hour_of_day`` (0–23) and ``weekday``
  (0 = Monday .. 6 = Sunday): the raw value is unique per hour of the
  10-day log and would only add a near-useless, time-leaking field. With
  ``--no-split-hour`` it is kept as one categorical field ``hour``.
* Every other column (C1, banner_pos, site_*, app_*, device_*, C14–C21) is a
  categorical field whose token text is the vocabulary key. There are no
  dense features.

Malformed lines: a column count different from the header's, a ``click``
other than 0/1, an ``hour`` that is not a valid ``YYMMDDHH`` timestamp.
"""

from __future__ import annotations

import os
from typing import Any, Sequence

import numpy as np

from ..errors import ImportDataError
from .csvfmt import CsvOptions, DelimitedLayout, read_columns, run_delimited
from .streaming import CommonOptions, check_inputs, parse_int_block, token


class _HourSplit:
    """Derived fields from ``hour``: (hour_of_day, weekday) or the raw value."""

    def __init__(self, col: int, split: bool):
        self.col = col
        self.split = split
        self.names = ["hour_of_day", "weekday"] if split else ["hour"]

    def __call__(self, buf, starts, ends):
        s, e = starts[:, [self.col]], ends[:, [self.col]]
        vals, status = parse_int_block(buf, s, e)
        v = vals[:, 0]
        lead = buf[np.minimum(s[:, 0], max(buf.size - 1, 0))] if buf.size else np.zeros(len(s), np.uint8)
        # eight digits exactly: a sign ("+4102100") parses as an integer but is no timestamp
        ok = (status[:, 0] == 0) & ((e - s)[:, 0] == 8) & (v >= 0) & (lead >= 48) & (lead <= 57)
        yy, mm, dd, hh = v // 1000000, (v // 10000) % 100, (v // 100) % 100, v % 100
        ok &= (mm >= 1) & (mm <= 12) & (dd >= 1) & (hh <= 23)
        # days since 1970-01-01 of 20YY-MM-01, then check the day fits the month
        month = ((2000 + np.where(ok, yy, 0) - 1970) * 12 + np.where(ok, mm, 1) - 1).astype("datetime64[M]")
        first = month.astype("datetime64[D]").astype(np.int64)
        next_first = (month + 1).astype("datetime64[D]").astype(np.int64)
        ok &= dd <= (next_first - first)
        days = first + dd - 1
        weekday = (days + 3) % 7  # 1970-01-01 was a Thursday (3 with Monday = 0)
        if self.split:
            keys = np.stack([hh, weekday], axis=1).astype(np.uint64)
        else:
            keys = v.reshape(-1, 1).astype(np.uint64)
        present = np.broadcast_to(ok[:, None], keys.shape).copy()

        def reason(i: int) -> str:
            return (f"column {self.col + 1} (hour) is not a YYMMDDHH timestamp: "
                    f"{token(buf, starts[i, self.col], ends[i, self.col])}")

        return keys, present, ~ok, reason


def import_avazu(inputs: Sequence[str | os.PathLike], out: str | os.PathLike, *, split_hour: bool = True,
                 common: CommonOptions | None = None) -> dict[str, Any]:
    """Import Avazu CSV file(s) into a prepared dataset at ``out``; returns its header."""
    common = common or CommonOptions()
    paths = check_inputs(inputs, fmt="avazu")
    cols = read_columns(paths, ",", "avazu")
    for need in ("click", "hour"):
        if need not in cols:
            hint = " (the competition's test file has no labels)" if need == "click" else ""
            raise ImportDataError(f"{paths[0]}: the avazu header has no {need!r} column{hint}; got {cols[:6]}...")
    label_col, hour_col = cols.index("click"), cols.index("hour")
    cat_cols = [i for i, c in enumerate(cols) if c not in ("id", "click", "hour")]
    # click must be exactly 0/1: a threshold of 0.5 on a parsed number plus the integer check below
    opts = CsvOptions(label="click", label_threshold=0.5)
    layout = DelimitedLayout(cols, ",", label_col, [], [], cat_cols, opts)
    derived = _HourSplit(hour_col, split_hour)
    return run_delimited(paths, out, fmt="avazu", layout=layout, common=common,
                         format_options={"split_hour": split_hour}, derived=_ClickCheck(derived, label_col))


class _ClickCheck:
    """Wraps the hour split and also rejects a click that is not exactly 0 or 1."""

    def __init__(self, inner: _HourSplit, label_col: int):
        self.inner = inner
        self.label_col = label_col
        self.names = inner.names

    def __call__(self, buf, starts, ends):
        keys, present, bad, reason = self.inner(buf, starts, ends)
        c = self.label_col
        vals, status = parse_int_block(buf, starts[:, [c]], ends[:, [c]])
        bad_click = (status[:, 0] != 0) | ((vals[:, 0] != 0) & (vals[:, 0] != 1))

        def reason2(i: int) -> str:
            if bad_click[i]:
                return f"column {c + 1} (click) is not 0 or 1: {token(buf, starts[i, c], ends[i, c])}"
            return reason(i)

        return keys, present, bad | bad_click, reason2
