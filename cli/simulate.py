"""``gmp simulate``: replay an epoch with a runtime schedule and count cache pulls and pushes."""

from __future__ import annotations

import typer

from ._common import check_seed, console, dataset_argument, echo_json, given, handle_errors
from ._flags import flag_of, flags_for_params
from ._options import options


def register(app: typer.Typer) -> None:
    @app.command("simulate")
    @options("simulate")
    @handle_errors
    def simulate_cmd(ctx: typer.Context, dataset_arg, dataset, manifest, workers, schedule, shuffle, on_demand,
                     cache_rows, cache_policy, lookahead, batch_size, embedding_dim, read_only_replicas,
                     parameter_server, min_frequency, seed, as_json,
    ) -> None:
        """Count the embedding pulls/pushes one epoch incurs under a schedule, without training."""
        from gmp.api import run_simulate
        from gmp.specs import resolve_simulate

        from .train import warn

        with flags_for_params():
            check_seed(seed)  # before the random placement, which numpy would refuse in a traceback
            dataset = dataset_argument(dataset_arg, dataset, "simulate")
            spec = resolve_simulate(dataset, manifest, workers=workers, seed=seed, parameter_server=parameter_server,
                                    min_frequency=min_frequency, shuffle=shuffle,
                                    **given(ctx, schedule=schedule, batch_size=batch_size, embedding_dim=embedding_dim,
                                            on_demand=on_demand, cache_rows=cache_rows, cache_policy=cache_policy,
                                            lookahead=lookahead, read_only_replicas=read_only_replicas))
            for line in spec.warnings:
                warn(line)
            result = run_simulate(spec)
            baseline = None if as_json or spec.schedule == "naive" else run_simulate(spec.with_schedule("naive"))
        out = result.to_json()
        if as_json:
            echo_json(out)
            return
        from rich.table import Table

        base = None if baseline is None else baseline.to_json()
        table = Table(title=f"gmp simulate: {out['schedule']} ({out['shuffle']} order), on-demand {'on' if out['on_demand'] else 'off'}, "
                            f"{out['workers']} workers, {out['batches']} batches")
        table.add_column("quantity")
        table.add_column(out["schedule"], justify="right")
        if base is not None:
            table.add_column(f"naive (baseline; on-demand {'on' if base['on_demand'] else 'off'})", justify="right")
        for key in ("pulls", "pull_miss", "pull_stale", "pushes", "push_sync", "push_plan", "push_evict",
                    "push_flush", "rows_pulled_bytes", "rows_pushed_bytes", "prefetchable_pulls",
                    "schedule_ms_per_batch"):
            cells = [out[key]] + ([] if base is None else [base[key]])
            table.add_row(key, *(f"{v:,}" if isinstance(v, int) else f"{v:.3f}" for v in cells))
        console().print(table)
        if spec.differs_from_train:
            typer.echo("defaults unlike gmp train's (Herald's paper): " + ", ".join(
                f"{_setting(k, here)} (gmp train: {_setting(k, there)})" for k, here, there in spec.differs_from_train),
                err=True)
        typer.echo(summary_line(out, base), err=True)


def _setting(param: str, value: str) -> str:
    """``--cache-rows 123``, or the one side of a boolean flag pair (``--writable-replicas``)."""
    flag = flag_of(param)
    if "/" in flag and value in ("True", "False"):
        return flag.split("/")[0 if value == "True" else 1]
    return f"{flag} {value}"


def summary_line(out: dict, base: dict | None) -> str:
    """One line: the schedule's pulls, pushes and bytes of the epoch, beside the naive baseline's."""
    def vs(key: str) -> str:
        if base is None or not base[key]:
            return ""
        change = out[key] / base[key] - 1.0
        return f" ({change:+.1%} vs naive)"

    total = out["rows_pulled_bytes"] + out["rows_pushed_bytes"]
    total_base = None if base is None else base["rows_pulled_bytes"] + base["rows_pushed_bytes"]
    tb = "" if not total_base else f" ({total / total_base - 1.0:+.1%} vs naive)"
    return (f"simulated 1 epoch of {out['batches']:,} batches on {out['workers']} workers, {out['schedule']}: "
            f"{out['pulls']:,} pulls{vs('pulls')}, {out['pushes']:,} pushes{vs('pushes')}, "
            f"{total / 1e6:,.2f} MB of rows moved{tb}")
