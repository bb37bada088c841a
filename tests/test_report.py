"""Quality report: report.json keys, Markdown/HTML rendering, plots, convergence table, re-validation."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from gmp.datasets.format import load_dataset
from gmp.errors import ManifestError
from gmp.graph import build_graph
from gmp.manifest import load_manifest, write_manifest
from gmp.metrics import compute_metrics
from gmp.placement import Placement
from gmp.report import build_report, load_report, render, report_from_manifest, write_report
from gmp.report.tables import convergence_table, per_worker_table
from gmp.topology import hierarchical

GOLDEN = Path(__file__).parent / "data" / "manifest_v1"
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"

#: the keys issue 3 promises other tools
REQUIRED_METRICS = {"remote_accesses", "remote_accesses_weighted", "epoch_unique_remote", "batch_remote_reads",
                    "batch_remote_pushes", "batch_size", "reduction_vs_random", "balance", "replication_factor",
                    "traffic_matrix", "partition_seconds", "peak_rss_bytes", "batch_remote_reads_bytes"}

ROUNDS = [
    {"round": 0, "objective": 10.0, "remote_accesses": 9, "sample_imbalance": 1.0, "seconds": 0.0},
    {"round": 1, "objective": 6.5, "remote_accesses": 5, "sample_imbalance": 1.02, "seconds": 0.1,
     "level": "worker", "extra": {"moved": 3}},
]


@pytest.fixture
def report(tiny_dataset):
    ds = load_dataset(tiny_dataset)
    graph = build_graph(ds)
    topo = hierarchical(2, 2)
    p = Placement.edge_cut(4, [0, 0, 1, 2, 3, 3], [0, 1, 0, 2, 3, 2], method="hand", seed=1,
                           options={"rounds": 1}, info={"rounds": ROUNDS})
    m = compute_metrics(graph, p, topo, batch_size=2, embedding_dim=8, partition_seconds=0.1, peak_rss_bytes=2**20)
    return build_report(placement=p, topology=topo, metrics=m, source="partition", dataset_sha256=ds.sha256,
                        graph=graph)


def test_report_json_keys(report, tmp_path):
    names = write_report(tmp_path, report, formats=("json", "md", "html"))
    assert set(names) == {"traffic.png", "loads.png", "degrees.png", "report.json", "report.md", "report.html"}
    obj = load_report(tmp_path / "report.json")
    assert obj["format"] == "gmp.report" and obj["schema_version"] == 1
    assert REQUIRED_METRICS <= set(obj["metrics"])
    assert set(obj["metrics"]["reduction_vs_random"]) == {
        "remote_accesses", "remote_accesses_weighted", "epoch_unique_remote", "batch_remote_reads",
        "batch_remote_pushes"}
    assert set(obj["metrics"]["balance"]) == {"samples", "edges", "rows_held", "traffic_served", "traffic_received"}
    assert obj["settings"]["topology"]["name"] == "2x2" and obj["settings"]["batch_size"] == 2
    assert obj["graph"]["num_active_embeddings"] == 6 and obj["graph"]["num_edges"] == 12
    assert sum(obj["degree_distribution"]["counts"]) == 6
    assert obj["convergence"][1]["objective"] == 6.5
    assert obj["plots"] == ["traffic.png", "loads.png", "degrees.png"]


def test_plots_are_pngs(report, tmp_path):
    write_report(tmp_path, report, formats=())
    for name in ("traffic.png", "loads.png", "degrees.png"):
        data = (tmp_path / name).read_bytes()
        assert data.startswith(PNG_MAGIC) and len(data) > 5000, name


def test_markdown_has_every_section(report):
    md = render(report, "md")
    for heading in ("## Communication", "## Balance and memory", "## Per worker", "## Convergence (per round)",
                    "## Settings", "## Graph"):
        assert heading in md
    assert "| batch remote reads (rows pulled / epoch) |" in md
    assert "| round | objective (Eq. 3) | remote accesses | sample imbalance | extra moved | time (s) |" in md
    assert "| topology | 2x2 |" in md
    # 4 workers -> 4 rows in the per-worker table
    headers, rows = per_worker_table(report["metrics"])
    assert len(rows) == 4 and headers[0] == "worker"


def test_no_convergence_section_without_rounds(report):
    report = dict(report, convergence=None)
    assert "Convergence" not in render(report, "md")


def test_html_is_self_contained(report):
    page = render(report, "html")
    assert page.startswith("<!DOCTYPE html>") and page.count("data:image/png;base64,") == 3
    assert "<h2>Convergence (per round)</h2>" in page


def test_convergence_table_columns():
    headers, rows = convergence_table(ROUNDS)
    # one level only (flat topology): no level column
    assert headers == ["round", "objective (Eq. 3)", "remote accesses", "sample imbalance", "extra moved", "time (s)"]
    assert rows[0] == ["0", "10", "9", "1.000", "—", "0.000"]
    assert rows[1] == ["1", "6.500", "5", "1.020", "3", "0.100"]
    # a hierarchical run logs machine-level then worker-level sweeps: the level column stays
    two_levels = [dict(ROUNDS[0], level="machine"), ROUNDS[1]]
    headers, rows = convergence_table(two_levels)
    assert headers[:2] == ["round", "level"] and [r[1] for r in rows] == ["machine", "worker"]


def test_report_from_golden_manifest_without_dataset():
    rep = report_from_manifest(load_manifest(GOLDEN))
    assert rep["source"] == "report.json (arrays re-validated)"
    assert rep["metrics"]["batch_remote_pushes"] == 1 and rep["convergence"][0]["objective"] == 3.0


def test_report_from_golden_manifest_with_dataset_recomputes(tiny_dataset):
    ds = load_dataset(tiny_dataset)
    rep = report_from_manifest(load_manifest(GOLDEN, dataset=ds), dataset=ds)
    stored = json.loads((GOLDEN / "report.json").read_text())
    assert rep["source"] == "recomputed from dataset"
    for key in ("batch_remote_reads", "batch_remote_pushes", "traffic_matrix", "per_worker", "reduction_vs_random"):
        assert rep["metrics"][key] == stored["metrics"][key], key
    # another batch size needs (and uses) the dataset
    rep1 = report_from_manifest(load_manifest(GOLDEN), dataset=ds, batch_size=1)
    assert rep1["metrics"]["batch_size"] == 1


def test_report_refuses_stale_report_json(tmp_path):
    path = tmp_path / "m"
    shutil.copytree(GOLDEN, path)
    obj = json.loads((path / "report.json").read_text())
    obj["metrics"]["per_worker"]["samples"] = [4, 2]
    (path / "report.json").write_text(json.dumps(obj))
    with pytest.raises(ManifestError, match=r"metrics\.per_worker\.samples is \[4, 2\], but sample_worker\.npy "
                                            r"counts \[3, 3\]"):
        report_from_manifest(load_manifest(path))


def test_report_without_report_json_uses_arrays(tmp_path):
    p = Placement.edge_cut(2, [0, 1, 1], [0, 0, 1, 1])
    path = write_manifest(tmp_path / "m", p, dataset_sha256="abc", num_samples=3, num_embeddings=4,
                          topology=hierarchical(1, 2), metrics={"batch_remote_reads": 7, "batch_size": 4})
    rep = report_from_manifest(load_manifest(path))
    assert rep["source"].startswith("manifest summary")
    assert rep["metrics"]["per_worker"]["samples"] == [1, 2]
    assert rep["metrics"]["batch_remote_reads"] == 7
    assert "| batch remote reads (rows pulled / epoch) | 7 |" in render(rep, "md")
    with pytest.raises(ManifestError, match="need `dataset`"):
        report_from_manifest(load_manifest(path), batch_size=8)


def test_newer_report_json_is_refused(tmp_path):
    (tmp_path / "report.json").write_text(json.dumps({"format": "gmp.report", "schema_version": 9}))
    with pytest.raises(ManifestError, match="schema_version 9; this gmp reads up to 1"):
        load_report(tmp_path / "report.json")


# --------------------------------------------------------------------------
# issue 16, items 5, 7 and 11: what a person reads
# --------------------------------------------------------------------------
HYBRID_INFO = {
    "rounds": [
        {"round": 0, "level": "worker", "objective": 40.0, "comm_weighted": 40.0, "expected_remote_reads": 40.0,
         "sample_imbalance": 1.0, "seconds": 0.01},
        {"round": 1, "level": "worker", "objective": 30.0, "comm_weighted": 30.0, "expected_remote_reads": 30.0,
         "sample_imbalance": 1.02, "seconds": 0.02},
    ],
    "replication": {"expected_remote_reads": 21.5, "num_secondaries": 2, "seconds": 0.03},
}


@pytest.fixture
def hybrid_report(tiny_dataset):
    ds = load_dataset(tiny_dataset)
    graph = build_graph(ds)
    topo = hierarchical(1, 2)
    p = Placement.edge_cut(2, [0, 0, 0, 1, 1, 1], [0, 0, 0, 1, 1, 1], method="hybrid", seed=0, info=HYBRID_INFO)
    m = compute_metrics(graph, p, topo, batch_size=2, embedding_dim=8)
    return build_report(placement=p, topology=topo, metrics=m, source="partition", dataset_sha256=ds.sha256,
                        graph=graph, dataset_name="tiny")


def md_tables(md: str) -> list[list[list[str]]]:
    """Every Markdown table of a page as rows of cells (header first, the --- line dropped)."""
    tables, current = [], []
    for line in md.splitlines() + [""]:
        if line.startswith("|"):
            if not line.startswith("|---"):
                current.append([c.strip() for c in line.strip("|").split(" | ")])
        elif current:
            tables.append(current)
            current = []
    return tables


def test_headline_is_total_bytes_with_reads_and_pushes_beneath(report):
    """The title's change counts reads and pushes together (both are rows of bytes_per_row), not the
    batch reads alone; the line under it gives each with its bytes."""
    m = report["metrics"]
    ref = m["reference"]
    pushes = ref["batch_remote_pushes"] // 4  # pushes fall 75%, unlike the reads: the total is neither
    m = dict(m, batch_remote_pushes=pushes,
             reduction_vs_random=dict(m["reduction_vs_random"], batch_remote_pushes=1 - pushes / ref["batch_remote_pushes"]))
    report = dict(report, dataset_name="criteo-1m", metrics=m)
    reads = m["batch_remote_reads"]
    change = -100 * (1 - (reads + pushes) / (ref["batch_remote_reads"] + ref["batch_remote_pushes"]))
    md = render(report, "md")
    assert md.splitlines()[0] == f"# hand on criteo-1m, 4 workers: {change:+.1f}% bytes moved vs random (reads + pushes)"
    page = render(report, "html", plots=False)
    assert f"<h1>hand on criteo-1m, 4 workers: {change:+.1f}% bytes moved vs random (reads + pushes)</h1>" in page
    read_change = -100 * (1 - reads / ref["batch_remote_reads"])
    push_change = -100 * (1 - pushes / ref["batch_remote_pushes"])
    row_bytes = 8 * 4  # embedding_dim 8, float32
    assert f"batch reads {read_change:+.1f}% ({reads * row_bytes:.0f} B)" in md.splitlines()[2]
    assert f"batch pushes {push_change:+.1f}% ({pushes * row_bytes:.0f} B)" in md.splitlines()[2]
    assert read_change != push_change  # the fixture tells the two apart


def test_convergence_table_ends_with_2d_step_and_measured_numbers(hybrid_report):
    assert hybrid_report["convergence"][-1] == {"round": "2D", "level": "replication", "expected_remote_reads": 21.5,
                                                "num_secondaries": 2, "seconds": 0.03}
    md = render(hybrid_report, "md")
    conv = md_tables(md.split("## Convergence (per round)")[1])[0]
    header, body = conv[0], conv[1:]
    # objective, weighted comm and expected reads were equal in every 1D round: one column, not three
    assert header == ["round", "objective (Eq. 3) = weighted comm = expected batch reads",
                      "sample imbalance", "secondaries", "time (s)"]
    assert [r[0] for r in body] == ["0", "1", "2D", "final"]
    assert body[2][1] == "21.500" and body[2][3] == "2"
    assert body[3][1] == f"{hybrid_report['metrics']['batch_remote_reads']:,}"


def test_report_tables_have_readable_unique_headers_and_fit(hybrid_report):
    md = render(hybrid_report, "md")
    for table in md_tables(md):
        header = table[0]
        assert not any("_" in h for h in header) and len(set(header)) == len(header), header
        assert len(header) <= 11, header
    conv = md_tables(md.split("## Convergence (per round)")[1])[0]
    columns = [tuple(r[j] for r in conv[1:]) for j in range(len(conv[0]))]
    assert len(set(columns)) == len(columns), conv[0]  # no two identical columns
    # no placement with secondaries here: per-worker batch reads and pushes are one column
    per_worker = md_tables(md.split("## Per worker")[1])[0][0]
    assert "batch reads = batch pushes" in per_worker


def captured_figures(monkeypatch):
    import matplotlib.figure

    seen = {}
    real = matplotlib.figure.Figure.savefig

    def savefig(fig, path, *a, **kw):
        ax = fig.axes[0]
        seen[Path(path).name] = {"title": ax.get_title(), "dpi": kw.get("dpi"),
                                 "lines": [(ln.get_xdata(), ln.get_ydata()) for ln in ax.lines]}
        return real(fig, path, *a, **kw)

    monkeypatch.setattr(matplotlib.figure.Figure, "savefig", savefig)
    return seen


def test_plots_print_resolution_titles_and_degree_ccdf(hybrid_report, tmp_path, monkeypatch):
    from PIL import Image

    seen = captured_figures(monkeypatch)
    write_report(tmp_path, hybrid_report, formats=())
    assert set(seen) == {"traffic.png", "loads.png", "degrees.png"}
    for name, fig in seen.items():
        assert "hybrid on tiny, 2 workers" in fig["title"], name
        dpi = Image.open(tmp_path / name).info["dpi"]
        assert dpi[0] >= 199.5, (name, dpi)
    # the tiny graph's active degrees are [2, 2, 3, 2, 2, 1] (embeddings 0..5): CCDF P(deg >= d)
    x, y = seen["degrees.png"]["lines"][0]
    expected = {1: 6 / 6, 2: 5 / 6, 3: 1 / 6}
    assert {int(a): round(float(b), 6) for a, b in zip(x, y)} == {k: round(v, 6) for k, v in expected.items()}
    assert "≥" in seen["degrees.png"]["title"] or "CCDF" in seen["degrees.png"]["title"]


def test_no_plots_writes_no_png(report, tmp_path):
    names = write_report(tmp_path, report, formats=("json", "md"), plots=False)
    assert names == ["report.json", "report.md"] and not list(tmp_path.glob("*.png"))
    assert "## Plots" not in (tmp_path / "report.md").read_text()


def test_dataset_name_of():
    from gmp.report import dataset_name_of

    assert dataset_name_of({"dataset_name": "criteo-1m"}, "/x/y") == "criteo-1m"
    assert dataset_name_of({"dataset": {"name": "frappe", "sha256": "ab"}}) == "frappe"
    assert dataset_name_of({}, "/data/avazu-10m/") == "avazu-10m"
    assert dataset_name_of({}) is None


# --------------------------------------------------------------------------
# the CLI: report --format html, --no-plots, compare at 80-100 columns and as HTML
# --------------------------------------------------------------------------
def cli(*args):
    from typer.testing import CliRunner

    from cli.main import app

    return CliRunner().invoke(app, [str(a) for a in args])


@pytest.fixture
def manifest_dir(tiny_dataset, tmp_path):
    out = tmp_path / "m"
    res = cli("partition", tiny_dataset, "-w", 2, "--method", "random", "--batch-size", 2, "--out", out)
    assert res.exit_code == 0, res.output
    return out


def test_report_html_goes_to_a_file_not_the_terminal(manifest_dir, tiny_dataset):
    res = cli("report", manifest_dir, "--format", "html")
    assert res.exit_code == 0, res.output
    page = manifest_dir / "report.html"
    assert res.output.strip() == f"wrote {page}" and len(res.output) < 500
    text = page.read_text()
    assert text.startswith("<!DOCTYPE html>") and text.count("data:image/png;base64,") == 3
    # the dataset directory's name heads the page when the manifest was made by 'gmp partition'
    assert f"<h1>random on {tiny_dataset.name}, 2 workers: " in text
    res = cli("report", manifest_dir, "--format", "html", "--out", "-", "--no-plots")
    assert res.exit_code == 0 and res.output.startswith("<!DOCTYPE html>") and "base64" not in res.output


def test_partition_no_plots_skips_matplotlib(tiny_dataset, tmp_path):
    import subprocess
    import sys

    out = tmp_path / "np"
    code = ("import sys\nfrom cli.main import app\n"
            f"app(['partition', {str(tiny_dataset)!r}, '-w', '2', '--method', 'random', '--out', {str(out)!r}, "
            "'--no-plots'], standalone_mode=False)\n"
            "print('matplotlib loaded:', 'matplotlib' in sys.modules)\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          cwd=Path(__file__).resolve().parents[1])
    assert proc.returncode == 0, proc.stderr
    assert "matplotlib loaded: False" in proc.stdout
    assert (out / "report.md").is_file() and not list(out.glob("*.png"))
    assert "no plots" not in proc.stderr
    res = cli("report", out, "--out", tmp_path / "r", "--no-plots")
    assert res.exit_code == 0 and not list((tmp_path / "r").glob("*.png"))


def test_compare_fits_100_columns_and_writes_html(tiny_dataset, tmp_path):
    out = tmp_path / "cmp.html"
    res = cli("compare", tiny_dataset, "-w", 2, "--methods", "random,greedy-stream", "--batch-size", 2,
              "--no-isolate", "--out", out)
    assert res.exit_code == 0, res.output
    lines = res.output.splitlines()
    assert max(len(line) for line in lines) <= 100, max(lines, key=len)
    assert any(line.lstrip("│┃ ").startswith("greedy-stream") for line in lines)
    page = out.read_text()
    assert page.startswith("<!DOCTYPE html>") and "<svg" in page
    obj_rows = 2  # methods
    metrics = page.count("<rect class='bar'") // obj_rows
    assert metrics >= 4 and page.count("<rect class='bar'") == obj_rows * metrics
    assert "random, batch reads: 100.0% of random" in page


def test_compare_tables_fit_80_columns(tiny_graph):
    from rich.console import Console
    from rich.table import Table

    from gmp.compare import compare, comparison_tables
    from gmp.topology import homogeneous

    res = compare(tiny_graph, homogeneous(2), ["random", "greedy-stream"], batch_size=2, isolate=False)
    con = Console(width=80, record=True, file=open("/dev/null", "w"))
    for title, (headers, rows) in comparison_tables(res):
        t = Table(title=title)
        for h in headers:
            t.add_column(h)
        for r in rows:
            t.add_row(*r)
        con.print(t)
    text = con.export_text()
    assert max(len(line) for line in text.splitlines()) <= 80
    assert "greedy-stream" in text and "100.0%" not in text  # changes, not shares, in the tables


# --------------------------------------------------------------------------
# the HTML report in a real (headless) browser
# --------------------------------------------------------------------------
def find_chromium() -> str | None:
    import shutil as _sh

    return next((p for p in (_sh.which(n) for n in ("chromium", "chromium-browser", "google-chrome")) if p), None)


@pytest.mark.skipif(find_chromium() is None,
                    reason="no chromium on PATH (Debian: apt-get install -y chromium); the HTML report is checked "
                           "in a headless browser only where one is installed")
def test_html_report_renders_in_headless_chromium(hybrid_report, tmp_path):
    import subprocess
    import tempfile

    import numpy as np
    from PIL import Image

    from gmp.report import write_html_file

    page = write_html_file(tmp_path / "report.html", hybrid_report)
    flags = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
             "--disable-component-update", "--disable-sync", "--no-first-run"]
    with tempfile.TemporaryDirectory() as profile:
        dom = subprocess.run([find_chromium(), *flags, f"--user-data-dir={profile}", "--dump-dom", page.as_uri()],
                             capture_output=True, text=True, timeout=120)
    assert dom.returncode == 0, dom.stderr[-2000:]
    assert "hybrid on tiny, 2 workers:" in dom.stdout and dom.stdout.count("<img") == 3
    shot = tmp_path / "shot.png"
    with tempfile.TemporaryDirectory() as profile:
        proc = subprocess.run([find_chromium(), *flags, f"--user-data-dir={profile}", "--window-size=1000,1800",
                               f"--screenshot={shot}", page.as_uri()], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0 and shot.is_file(), proc.stderr[-2000:]
    pixels = np.asarray(Image.open(shot).convert("L"), dtype=np.float64)
    assert pixels.shape == (1800, 1000)
    # a rendered page, not a blank one: dark text and plot ink on a white background
    assert (pixels < 128).mean() > 0.005 and (pixels > 240).mean() > 0.5


@pytest.mark.skipif(find_chromium() is None,
                    reason="no chromium on PATH (Debian: apt-get install -y chromium); the HTML report is checked "
                           "in a headless browser only where one is installed")
@pytest.mark.parametrize("width", [1000, 600])
def test_html_report_plots_keep_their_aspect_ratio_in_headless_chromium(hybrid_report, tmp_path, width):
    """Each plot is shown at its PNG's own width:height (a flex row stretched them all to the tallest
    plot's height: loads.png, 1860x760, was shown at about 530x490)."""
    import subprocess
    import tempfile

    from gmp.report import write_html_file

    page = write_html_file(tmp_path / "report.html", hybrid_report)
    probe = ("<script>window.addEventListener('load', () => { const out = document.createElement('pre'); "
             "out.id = 'sizes'; out.textContent = [...document.images].map(i => { const r = "
             "i.getBoundingClientRect(); return [i.alt, i.naturalWidth, i.naturalHeight, r.width, r.height]"
             ".join(' '); }).join('\\n'); document.body.appendChild(out); });</script></body>")
    page.write_text(page.read_text(encoding="utf-8").replace("</body>", probe), encoding="utf-8")
    flags = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
             "--disable-component-update", "--disable-sync", "--no-first-run", f"--window-size={width},1800"]
    with tempfile.TemporaryDirectory() as profile:
        dom = subprocess.run([find_chromium(), *flags, f"--user-data-dir={profile}", "--dump-dom", page.as_uri()],
                             capture_output=True, text=True, timeout=120)
    assert dom.returncode == 0, dom.stderr[-2000:]
    sizes = dom.stdout.split("<pre id=\"sizes\">")[1].split("</pre>")[0].strip().splitlines()
    assert sorted(line.split()[0] for line in sizes) == ["degrees", "loads", "traffic"]
    for line in sizes:
        name, nat_w, nat_h, shown_w, shown_h = line.split()[0], *map(float, line.split()[1:])
        assert shown_w > 0 and shown_h > 0, line
        assert shown_h / shown_w == pytest.approx(nat_h / nat_w, rel=0.02), line


def test_secondaries_on_unread_rows_show_the_placement_total_too():
    """Rows 2 and 3 are never read (an old manifest's rows under --from-manifest): the report counts the
    secondary of row 0 only, the placement (manifest.json) all three; the page labels its count and shows both."""
    from gmp.graph import BipartiteGraph
    from gmp.topology import homogeneous

    graph = BipartiteGraph.from_csr([0, 2, 3], [0, 1, 1], num_embeddings=4)  # reads rows 0 and 1 only
    p = Placement.edge_cut(2, [0, 1], [0, 1, 0, 1], method="hand", seed=0).with_secondaries(
        np.array([0, 1, 1, 2, 3], dtype=np.int64), np.array([1, 1, 0], dtype=np.int32))
    read_rows_with_secondary = 1  # row 0 (worker 1); rows 2 and 3 hold the other two
    m = compute_metrics(graph, p, homogeneous(2), batch_size=1, embedding_dim=4)
    assert m["num_secondaries"] == read_rows_with_secondary and p.num_secondaries == 3
    rep = build_report(placement=p, topology=homogeneous(2), metrics=m, source="partition", graph=graph)
    rows = {r[0]: r[1] for t in md_tables(render(rep, "md", placement_secondaries=p.num_secondaries)) for r in t}
    assert rows["secondaries (on rows the data reads)"] == "1"
    assert rows["secondaries in the placement (every row, as manifest.json counts)"] == "3"
    same = {r[0] for t in md_tables(render(rep, "md", placement_secondaries=1)) for r in t}
    assert "secondaries in the placement (every row, as manifest.json counts)" not in same  # equal: one row
    page = render(rep, "html", plots=False, placement_secondaries=p.num_secondaries)
    assert "secondaries (on rows the data reads)" in page and "as manifest.json counts" in page


@pytest.mark.parametrize("generations, said", [(1, "1 generation after"), (2, "2 generations after")])
def test_the_incremental_note_counts_generations_with_the_plural_helper(generations, said):
    from gmp.report.tables import incremental_note

    note = incremental_note({"generations": generations, "old_manifest": "p0", "old_placement_sha256": "ab" * 32,
                             "batch_size": 512, "embedding_dim": 16, "created_rows": 0})
    assert f"the new data is {said} its dataset)" in note


@pytest.mark.parametrize("name, said", [("1x8", "8 workers (1 machine x 8,"), ("2x4", "8 workers (2 machines x 4,")])
def test_workers_phrase_counts_machines(name, said):
    from gmp.report.tables import workers_phrase

    assert workers_phrase(8, name).startswith(said)
