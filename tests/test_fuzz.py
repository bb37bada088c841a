"""Fuzz harness (issue 17): mutated input lines for every import format and mutated
dataset.json / manifest.json / checkpoint.json headers, run through the CLI.

The property, for every example: exit 0 with a valid output (the dataset loads and its
hash and arrays verify), or exit 2 with exactly one ``error: ...`` line on stderr and no
output left behind (no directory, no hidden temporary) — never a traceback, a hang or a
half-written output.

Bounded so CI stays fast: a fixed number of examples per target (a few hundred in all),
derandomised (the same examples every run), a hypothesis ``deadline`` and, so that a
hang fails instead of blocking CI, a per-example alarm (SIGALRM) plus a hard
``faulthandler`` stop for hangs inside compiled code.
"""

from __future__ import annotations

import contextlib
import faulthandler
import json
import os
import shutil
import signal
import sys
from datetime import timedelta
from pathlib import Path

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from cli.main import app
from gmp.datasets.format import load_dataset

FIX = Path(__file__).parent / "data" / "import"
runner = CliRunner()
#: seconds one example may take before it counts as a hang
EXAMPLE_TIMEOUT = 30

#: GMP_FUZZ_SCALE=10 runs ten times the examples, drawn at random (a deeper local run)
SCALE = max(1, int(os.environ.get("GMP_FUZZ_SCALE", "1")))

# the deadline is generous (CI machines are shared and noisy; a slow example is not a bug), the
# alarm below is what turns a hang into a failure
SETTINGS = dict(deadline=timedelta(seconds=20), derandomize=SCALE == 1, database=None,
                suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow,
                                       HealthCheck.data_too_large])


@contextlib.contextmanager
def time_limit(seconds: int = EXAMPLE_TIMEOUT):
    """Fail an example that runs longer than ``seconds`` (a hang)."""
    if not hasattr(signal, "SIGALRM"):  # pragma: no cover - not on Linux
        yield
        return

    def expired(*_):
        raise TimeoutError(f"example ran longer than {seconds} s: a hang")

    old = signal.signal(signal.SIGALRM, expired)
    signal.alarm(seconds)
    # a hang inside compiled code never returns to the interpreter: stop the whole run loudly
    faulthandler.dump_traceback_later(seconds * 3, exit=True, file=sys.stderr)
    try:
        yield
    finally:
        signal.alarm(0)
        faulthandler.cancel_dump_traceback_later()
        signal.signal(signal.SIGALRM, old)


def invoke(*args):
    with time_limit():
        return runner.invoke(app, [str(a) for a in args])


def assert_clean(res, out: Path | None = None) -> bool:
    """The property. Returns True when the command succeeded."""
    if res.exit_code == 0:
        return True
    assert res.exit_code == 2, (res.exit_code, repr(res.exception), res.output[-2000:])
    assert isinstance(res.exception, SystemExit), repr(res.exception)
    err = res.stderr.strip()
    assert err.startswith("error: ") and "\n" not in err, err[-2000:]
    assert "Traceback" not in res.output
    if out is not None:
        assert not out.exists(), f"{out} left behind after a failure"
        assert not [p for p in out.parent.iterdir() if p.name.startswith(f".{out.name}.")], "temporary left behind"
    return False


# --------------------------------------------------------------------------- mutated input lines
TOKENS = [b"", b"nan", b"NaN", b"inf", b"-inf", b"1e400", b"-1e400", b"1e300", b"18446744073709551616",
          b"99999999999999999999999", b"-1", b"+4102100", b"\xef\xbb\xbf", b"\r", b"\x00", b"\xff\xfe", b"\t", b",",
          b":", b"|", b" ", b'"', b"0:1:1", b"1:1", b"0x1f", b"-0", b"1.5", b"deadbeefdeadbeef1", b"\n"]

mutation = st.one_of(
    st.tuples(st.just("replace_token"), st.integers(0, 10**6), st.sampled_from(TOKENS)),
    st.tuples(st.just("insert"), st.integers(0, 10**6), st.sampled_from(TOKENS)),
    st.tuples(st.just("insert_bytes"), st.integers(0, 10**6), st.binary(min_size=1, max_size=6)),
    st.tuples(st.just("delete"), st.integers(0, 10**6), st.integers(1, 40)),
    st.tuples(st.just("truncate"), st.integers(0, 10**6), st.just(b"")),
    st.tuples(st.just("drop_final_newline"), st.just(0), st.just(b"")),
    st.tuples(st.just("duplicate_line"), st.integers(0, 10**6), st.just(b"")),
)


def mutate(data: bytes, ops) -> bytes:
    for op, pos, arg in ops:
        n = max(len(data), 1)
        p = pos % n
        if op == "replace_token":  # replace the cell/token around p (between separators)
            seps = b"\t,: \n|"
            a = p
            while a > 0 and data[a - 1] not in seps:
                a -= 1
            b = p
            while b < len(data) and data[b] not in seps:
                b += 1
            data = data[:a] + arg + data[b:]
        elif op in ("insert", "insert_bytes"):
            data = data[:p] + arg + data[p:]
        elif op == "delete":
            data = data[:p] + data[p + arg:]
        elif op == "truncate":
            data = data[:p]
        elif op == "drop_final_newline":
            data = data.rstrip(b"\n")
        elif op == "duplicate_line":
            lines = data.split(b"\n")
            k = p % len(lines)
            lines.insert(k, lines[k])
            data = b"\n".join(lines)
    return data


FORMATS = {
    "criteo": ("criteo_small.tsv", []),
    "avazu": ("avazu_small.csv", []),
    "csv": ("mixed_small.csv", None),  # flags derived from the header below
    "libsvm": ("small.libsvm", []),
    "libffm": ("small.libffm", []),
    "movielens": ("ml_classic/u.data", []),
}


def csv_flags() -> list[str]:
    return ["--label", "income", "--label-positive", ">50K", "--dense", "age,hours", "--multi", "tags"]


@pytest.fixture(scope="module")
def warm(tmp_path_factory):
    """Compile the numba kernels once, outside any deadline."""
    root = tmp_path_factory.mktemp("warm")
    for fmt, (name, extra) in FORMATS.items():
        src = FIX / name if fmt != "movielens" else FIX / "ml_classic"
        extra = csv_flags() if extra is None else extra
        res = invoke("data", "import", fmt, src, "--out", root / fmt, *extra)
        assert res.exit_code == 0, (fmt, res.output)
    return root


@pytest.mark.parametrize("fmt", sorted(FORMATS))
def test_fuzz_import_lines(fmt, warm, tmp_path_factory):
    name, extra = FORMATS[fmt]
    extra = csv_flags() if extra is None else extra
    original = (FIX / name).read_bytes()
    root = tmp_path_factory.mktemp(f"fuzz-{fmt}")
    counter = iter(range(10**9))

    @settings(max_examples=30 * SCALE, **SETTINGS)
    @given(ops=st.lists(mutation, min_size=1, max_size=4), skip=st.sampled_from([0, 0, 1000]))
    def check(ops, skip):
        case = root / f"c{next(counter)}"
        case.mkdir()
        if fmt == "movielens":
            shutil.copytree(FIX / "ml_classic", case / "ml")
            src = case / "ml"
            (src / "u.data").write_bytes(mutate(original, ops))
        else:
            src = case / name
            src.write_bytes(mutate(original, ops))
        out = case / "out"
        res = invoke("data", "import", fmt, src, "--out", out, "--max-bad-lines", skip, *extra)
        if assert_clean(res, out):
            ds = load_dataset(out, verify=True)  # hash and arrays verify
            assert ds.num_samples >= 1 and ds.num_train >= 1
            assert np.isfinite(np.asarray(ds.labels)).all()
            if ds.dense is not None:
                assert np.isfinite(np.asarray(ds.dense)).all()
        shutil.rmtree(case)

    check()


# --------------------------------------------------------------------------- mutated JSON headers
JSON_VALUES = st.one_of(
    st.none(), st.booleans(), st.integers(-10, 10), st.sampled_from([2**63, -(2**63), 10**20, 0, 1]),
    st.floats(allow_nan=False, allow_infinity=False, width=32), st.sampled_from([0.5, 2.5, -1.5, 1e308]),
    st.text(max_size=8), st.sampled_from(["", "x", "2", "nan", "inf", "1e400", "gmp.dataset"]),
    st.lists(st.integers(-3, 3), max_size=3), st.just({}), st.just({"a": 1}), st.just([[[[]]]]),
)


def json_paths(obj, prefix=()):
    """Every (path) to a value inside a parsed JSON object."""
    out = [prefix] if prefix else []
    if isinstance(obj, dict):
        for k, v in obj.items():
            out += json_paths(v, prefix + (k,))
    elif isinstance(obj, list):
        for i, v in enumerate(obj[:4]):
            out += json_paths(v, prefix + (i,))
    return out


@st.composite
def json_edits(draw, obj):
    paths = json_paths(obj)
    edits = []
    for _ in range(draw(st.integers(1, 3))):
        path = draw(st.sampled_from(paths))
        edits.append((path, draw(st.sampled_from(["set", "set", "delete", "nest"])), draw(JSON_VALUES)))
    return edits


def apply_edits(obj, edits):
    obj = json.loads(json.dumps(obj))
    for path, op, value in edits:
        parent = obj
        try:
            for key in path[:-1]:
                parent = parent[key]
            key = path[-1]
            if op == "delete":
                del parent[key]
            elif op == "nest":
                parent[key] = json.loads("[" * 60 + "1" + "]" * 60)
            else:
                parent[key] = value
        except (KeyError, IndexError, TypeError):
            continue
    return obj


@pytest.fixture(scope="module")
def pipeline(tmp_path_factory):
    """A tiny dataset, a manifest of it and a checkpoint of a one-epoch run."""
    root = tmp_path_factory.mktemp("pipe")
    ds = root / "ds"
    assert invoke("data", "import", "criteo", FIX / "criteo_small.tsv", "--out", ds).exit_code == 0
    man = root / "man"
    # planned for the training run below (another batch size or width would add a warning line)
    res = invoke("partition", ds, "-w", 2, "-m", "random", "--out", man, "--batch-size", 16, "--embedding-dim", 2)
    assert res.exit_code == 0, res.output
    # warm up every command the examples run (imports, compiled kernels) outside the deadline
    for args in (("data", "info", ds, "--json"), ("report", man, "--dataset", ds, "--format", "json"),
                 ("simulate", "--dataset", ds, "--manifest", man, "--json")):
        assert invoke(*args).exit_code == 0, args
    return root, ds, man


def _fresh_copy(src: Path, dst: Path) -> Path:
    if dst.exists():
        shutil.rmtree(dst)
    shutil.copytree(src, dst, symlinks=True)
    return dst


def test_fuzz_dataset_json(pipeline, warm):
    root, ds, man = pipeline
    header = json.loads((ds / "dataset.json").read_text())

    @settings(max_examples=50 * SCALE, **SETTINGS)
    @given(edits=json_edits(header))
    def check(edits):
        case = _fresh_copy(ds, root / "ds-fuzz")
        (case / "dataset.json").write_text(json.dumps(apply_edits(header, edits)))
        assert_clean(invoke("data", "info", case, "--json"))
        out = root / "m-fuzz"
        res = invoke("partition", case, "-w", 2, "-m", "random", "--out", out)
        if assert_clean(res, out):
            shutil.rmtree(out)
        assert_clean(invoke("simulate", "--dataset", case, "--workers", 2, "--json"))

    check()


def test_fuzz_manifest_json(pipeline, warm):
    root, ds, man = pipeline
    header = json.loads((man / "manifest.json").read_text())

    @settings(max_examples=40 * SCALE, **SETTINGS)
    @given(edits=json_edits(header))
    def check(edits):
        case = _fresh_copy(man, root / "man-fuzz")
        (case / "manifest.json").write_text(json.dumps(apply_edits(header, edits)))
        assert_clean(invoke("report", case, "--format", "json"))
        assert_clean(invoke("report", case, "--dataset", ds, "--format", "json"))
        assert_clean(invoke("simulate", "--dataset", ds, "--manifest", case, "--json"))

    check()


@pytest.fixture(scope="module")
def checkpointed(pipeline):
    root, ds, man = pipeline
    torch.set_num_threads(1)
    ck = root / "ck"
    res = invoke("train", "--dataset", ds, "--manifest", man, "--epochs", 1, "--batch-size", 16,
                 "--embedding-dim", 2, "--checkpoint-dir", ck)
    assert res.exit_code == 0, res.output
    return ck


def test_fuzz_checkpoint_json(pipeline, checkpointed):
    root, ds, man = pipeline
    target = checkpointed / os.readlink(checkpointed / "latest")
    header = json.loads((target / "checkpoint.json").read_text())

    @settings(max_examples=30 * SCALE, **SETTINGS)
    @given(edits=json_edits(header))
    def check(edits):
        case = _fresh_copy(checkpointed, root / "ck-fuzz")
        t = case / os.readlink(case / "latest")
        (t / "checkpoint.json").write_text(json.dumps(apply_edits(header, edits)))
        res = invoke("train", "--dataset", ds, "--manifest", man, "--epochs", 2, "--batch-size", 16,
                     "--embedding-dim", 2, "--checkpoint-dir", case, "--resume")
        assert_clean(res)

    check()


# --------------------------------------------------------------------------- inputs without a newline (issue 38)
@pytest.mark.parametrize("fmt", sorted(FORMATS))
def test_fuzz_newline_less_input(fmt, warm, tmp_path):
    """An input with no newline ends in one line naming the line and its byte offset, bounded in time and
    memory (it was buffered whole and re-copied per block: /dev/zero grew without bound). The streaming
    formats read /dev/zero itself; the others (they read the header from a regular file first) a sparse
    file of 17 MiB of zeros."""
    from gmp.datasets.streaming import MAX_LINE_BYTES

    extra = csv_flags() if FORMATS[fmt][1] is None else FORMATS[fmt][1]
    if fmt in ("criteo", "libsvm", "libffm"):
        src = Path("/dev/zero")
    else:
        name = "u.data" if fmt == "movielens" else "input"
        base = tmp_path / "ml" if fmt == "movielens" else tmp_path
        if fmt == "movielens":
            shutil.copytree(FIX / "ml_classic", base)
        src = base / name
        with open(src, "wb") as f:
            f.truncate(MAX_LINE_BYTES + 4096)
        src = base if fmt == "movielens" else src
    out = tmp_path / "out"
    res = invoke("data", "import", fmt, src, "--out", out, *extra)
    assert not assert_clean(res, out)
    assert "malformed line, more than 16 MiB" in res.stderr and "byte offset" in res.stderr, res.stderr


def test_fuzz_fifo_log_does_not_hang(pipeline, tmp_path):
    """``--log-json`` a FIFO (or /dev/stdout, /dev/stderr) is a stream to append to: it was opened for reading
    to validate it, which waits for a writer that never comes (a hang before training)."""
    import threading

    root, ds, man = pipeline
    fifo = tmp_path / "log.fifo"
    os.mkfifo(fifo)
    got: list[bytes] = []
    reader = threading.Thread(target=lambda: got.append(fifo.read_bytes()), daemon=True)
    reader.start()
    try:
        res = invoke("train", "--dataset", ds, "--manifest", man, "--epochs", 1, "--batch-size", 16,
                     "--embedding-dim", 2, "--log-json", fifo)
    finally:
        with contextlib.suppress(OSError):  # let a reader still waiting see the end
            os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
    reader.join(10)
    assert res.exit_code == 0, res.output
    records = [json.loads(line) for line in got[0].decode().splitlines()]
    assert [r["kind"] for r in records] == ["settings", "epoch"] and records[1]["epoch"] == 1


# --------------------------------------------------------------------------- issue 38: loops, nested parquet, headers
@pytest.mark.parametrize("fmt", sorted(FORMATS) + ["parquet", "libfm"])
def test_fuzz_symlink_loops(fmt, tmp_path):
    """A symlink loop as the input, as ``--out`` and as a directory above ``--out``: one line, nothing written."""
    loop = tmp_path / "loop"
    loop.symlink_to(loop)
    name, extra = FORMATS.get(fmt, ("", []))
    extra = csv_flags() if extra is None else extra
    if fmt == "parquet":
        extra = ["--label", "label"]
    assert not assert_clean(invoke("data", "import", fmt, loop, "--out", tmp_path / "o", *extra), tmp_path / "o")
    if name:
        src = FIX / name if fmt != "movielens" else FIX / "ml_classic"
        for out in (loop, loop / "x", loop / "x" / "y"):
            assert not assert_clean(invoke("data", "import", fmt, src, "--out", out, *extra))


NESTED_TYPES = st.sampled_from(["struct", "map", "list<list>", "list", "list<struct>", "struct<list>"])


def _nested_column(pa, kind: str, n: int):
    return {
        "struct": lambda: pa.array([{"a": i, "b": str(i)} for i in range(n)]),
        "map": lambda: pa.array([[("k", i)] for i in range(n)], type=pa.map_(pa.string(), pa.int64())),
        "list<list>": lambda: pa.array([[[i], [i + 1]] for i in range(n)]),
        "list": lambda: pa.array([[i, i + 1] for i in range(n)]),
        "list<struct>": lambda: pa.array([[{"a": i}] for i in range(n)]),
        "struct<list>": lambda: pa.array([{"a": [i]} for i in range(n)]),
    }[kind]()


def test_fuzz_nested_parquet(tmp_path_factory):
    """Nested Arrow columns in every role: imported (a list as --multi) or one line, never a traceback."""
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    root = tmp_path_factory.mktemp("nested")

    @settings(max_examples=24 * SCALE, **SETTINGS)
    @given(kind=NESTED_TYPES, role=st.sampled_from([[], ["--multi", "x"], ["--dense", "x"], ["--cat", "c,x"]]),
           as_label=st.booleans())
    def check(kind, role, as_label):
        src = root / "n.parquet"
        pq.write_table(pa.table({"label": [0, 1, 0, 1, 1, 0], "c": list("abacab"), "x": _nested_column(pa, kind, 6)}),
                       src)
        out = root / "o"
        label = ["--label", "x"] if as_label else ["--label", "label"]
        if assert_clean(invoke("data", "import", "parquet", src, "--out", out, *label, *([] if as_label else role)),
                        out):
            load_dataset(out, verify=True)
            shutil.rmtree(out)

    check()


#: dataset.json keys whose edits change the header's meaning (dataset schema 3 binds them to the arrays)
MEANING_EDITS = st.one_of(
    st.tuples(st.sampled_from(["offset", "num_values", "missing_id", "rare_id", "column"]), st.integers(0, 200)),
    st.tuples(st.just("ranges"), st.lists(st.lists(st.integers(0, 200), min_size=2, max_size=2), max_size=3)),
    st.tuples(st.sampled_from(["num_train", "num_test", "num_dense", "num_embeddings"]), st.integers(0, 200)),
    st.tuples(st.sampled_from(["duplicate", "drop"]), st.just(0)),
)


def test_fuzz_header_consistency(pipeline, warm):
    """Meaningful edits of dataset.json, with its sha256 left alone or recomputed from the edited header:
    opened (the edit was consistent and the hash recomputed) or one line; never a traceback or a wrong run."""
    from gmp.datasets.format import FieldInfo, header_sha256

    root, ds, man = pipeline
    header = json.loads((ds / "dataset.json").read_text())
    original = load_dataset(ds)

    @settings(max_examples=40 * SCALE, **SETTINGS)
    @given(edits=st.lists(st.tuples(st.integers(0, 40), MEANING_EDITS), min_size=1, max_size=3), reseal=st.booleans())
    def check(edits, reseal):
        meta = json.loads(json.dumps(header))
        for i, (key, value) in edits:
            f = meta["fields"][i % len(meta["fields"])]
            if key in ("num_train", "num_test"):
                meta["split"][key] = value
            elif key in ("num_dense", "num_embeddings"):
                meta[key] = value
            elif key == "duplicate":
                meta["fields"].append(dict(f))
            elif key == "drop":
                meta["fields"].remove(f)
            else:
                f[key] = value
        if reseal:
            try:
                meta["sha256"] = header_sha256(meta, [FieldInfo.from_json(f) for f in meta["fields"]])
            except Exception:  # noqa: BLE001 - an edit FieldInfo refuses: the hash stays as it was
                pass
        case = _fresh_copy(ds, root / "hdr-fuzz")
        (case / "dataset.json").write_text(json.dumps(meta))
        if assert_clean(invoke("data", "info", case, "--json")):
            opened = load_dataset(case, verify=True)
            assert opened.sha256 == meta["sha256"]
            if not reseal:  # the hash left alone: only an edit that changes no meaning opens (a dense field's ranges)
                assert [f.to_json() for f in opened.fields] == [f.to_json() for f in original.fields]
                assert (opened.num_train, opened.num_test, opened.num_dense) == \
                    (original.num_train, original.num_test, original.num_dense)
        assert_clean(invoke("simulate", "--dataset", case, "--manifest", man, "--json"))

    check()
