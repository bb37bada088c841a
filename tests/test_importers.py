"""Raw-data importers: values checked against a slow pure-Python reference and
hand-derived ids; every malformed-input case with its error text."""

from __future__ import annotations

import gzip
import json
import math
import os
import shutil
import zlib
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gmp.datasets import load_dataset
from gmp.datasets.avazu import import_avazu
from gmp.datasets.criteo import import_criteo
from gmp.datasets.csvfmt import CsvOptions, import_csv
from gmp.datasets.streaming import CommonOptions, hash_strings, iter_chunks
from gmp.datasets.libsvm import import_libsvm
from gmp.datasets.movielens import import_movielens
from gmp.datasets.vocab import Vocabulary
from gmp.errors import ImportDataError

FIX = Path(__file__).parent / "data" / "import"
CRITEO = FIX / "criteo_small.tsv"


def opts(**kw) -> CommonOptions:
    return CommonOptions(**kw)


def rows_of(ds) -> list[list[int]]:
    ip, ix = np.asarray(ds.indptr), np.asarray(ds.indices)
    return [ix[ip[i] : ip[i + 1]].tolist() for i in range(ds.num_samples)]


def assert_nothing_left(parent: Path, name: str) -> None:
    left = [p.name for p in parent.iterdir() if p.name == name or p.name.startswith(f".{name}.tmp")]
    assert left == [], left


# ---------------------------------------------------------------------------
# a slow reference for Criteo: plain str.split, Counter, sorted()
# ---------------------------------------------------------------------------
def reference_criteo(path: Path, min_count: int = 1):
    lines = [ln.rstrip("\n").split("\t") for ln in open(path)]
    lines = [ln + [""] * (40 - len(ln)) for ln in lines]
    labels = [float(ln[0]) for ln in lines]
    dense = [[math.log1p(max(int(v), 0)) if v else 0.0 for v in ln[1:14]] for ln in lines]
    rows: list[set[int]] = [set() for _ in lines]
    offset = 0
    sizes = []
    for j in range(26):
        col = [ln[14 + j] for ln in lines]
        counts = Counter(int(v, 16) for v in col if v)
        first_seen = {}
        for v in col:
            if v:
                first_seen.setdefault(int(v, 16), len(first_seen))
        kept = sorted((k for k in counts if counts[k] >= min_count), key=lambda k: (-counts[k], first_seen[k]))
        local = {k: 2 + i for i, k in enumerate(kept)}
        for r, v in enumerate(col):
            lid = 0 if not v else local.get(int(v, 16), 1)
            rows[r].add(offset + lid)
        sizes.append(2 + len(kept))
        offset += 2 + len(kept)
    return labels, np.array(dense, dtype=np.float32), [sorted(r) for r in rows], sizes, offset


@pytest.mark.parametrize("min_count", [1, 2, 3])
def test_criteo_matches_reference(tmp_path, min_count):
    meta = import_criteo([CRITEO], tmp_path / "out", common=opts(min_count=min_count))
    ds = load_dataset(tmp_path / "out")
    labels, dense, rows, sizes, total = reference_criteo(CRITEO, min_count)
    assert ds.labels.tolist() == labels
    np.testing.assert_allclose(ds.dense, dense, rtol=1e-6)
    assert rows_of(ds) == rows
    assert ds.num_embeddings == total
    cats = [f for f in ds.fields if f.kind != "dense"]
    assert [f.num_values for f in cats] == sizes
    assert [f.name for f in ds.fields] == [f"I{i}" for i in range(1, 14)] + [f"C{i}" for i in range(1, 27)]
    assert all(f.missing_id == f.offset and f.rare_id == f.offset + 1 for f in cats)
    assert meta["source"]["options"]["min_count"] == min_count
    assert meta["num_bad_lines"] == 0


def test_criteo_hand_checked_values(tmp_path):
    import_criteo([CRITEO], tmp_path / "out")
    ds = load_dataset(tmp_path / "out")
    # C1 = 68fd1e64 in rows 0, 1, 3 (most frequent -> local 2), 287e684f (row 2) -> 3, 8cf07265 -> 4, 05db9164 -> 5
    c1 = [r[0] for r in rows_of(ds)]
    assert c1 == [2, 2, 3, 2, 4, 5]
    # row 4 (line 5) has 37 columns: C24..C26 are padded as missing (local 0)
    f = {x.name: x for x in ds.fields}
    row4 = set(rows_of(ds)[4])
    for name in ("C24", "C25", "C26"):
        assert f[name].missing_id in row4
    # I2 = -1 in row 4 is clamped to 0 before log1p; I1 = 3 -> log(4)
    assert ds.dense[4, 1] == 0.0
    assert ds.dense[4, 0] == pytest.approx(math.log(4.0))
    # empty I3 in row 4 -> 0
    assert ds.dense[4, 2] == 0.0


def test_criteo_chunking_and_gzip_give_identical_datasets(tmp_path):
    big = import_criteo([CRITEO], tmp_path / "a")
    small = import_criteo([CRITEO], tmp_path / "b", common=opts(chunk_bytes=100))
    gz = tmp_path / "c.tsv.gz"
    gz.write_bytes(gzip.compress(CRITEO.read_bytes()))
    zipped = import_criteo([gz], tmp_path / "c", common=opts(chunk_bytes=333))
    assert big["sha256"] == small["sha256"] == zipped["sha256"]


def test_criteo_crlf_and_no_final_newline(tmp_path):
    text = CRITEO.read_text().rstrip("\n").replace("\n", "\r\n")
    p = tmp_path / "crlf.tsv"
    p.write_text(text)
    a = import_criteo([p], tmp_path / "a")
    b = import_criteo([CRITEO], tmp_path / "b")
    assert a["sha256"] == b["sha256"]


def test_criteo_two_inputs_concatenate(tmp_path):
    meta = import_criteo([CRITEO, CRITEO], tmp_path / "out")
    assert meta["num_samples"] == 12
    ds = load_dataset(tmp_path / "out")
    assert rows_of(ds)[:6] == rows_of(ds)[6:]


def test_criteo_hashed_field(tmp_path):
    meta = import_criteo([CRITEO], tmp_path / "out", common=opts(hash_sizes={"C1": 4}))
    ds = load_dataset(tmp_path / "out")
    c1 = next(f for f in ds.fields if f.name == "C1")
    assert (c1.num_values, c1.hash_buckets, c1.rare_id, c1.missing_id) == (5, 4, None, 0)
    ids = [r[0] for r in rows_of(ds)]
    assert all(1 <= i <= 4 for i in ids)
    assert ids[0] == ids[1] == ids[3]  # same value 68fd1e64, same bucket
    assert meta["source"]["options"]["hash"] == {"C1": 4}


def test_unknown_hash_field_is_rejected(tmp_path):
    with pytest.raises(ImportDataError, match=r"`hash_sizes` names unknown field\(s\) \['C99'\]"):
        import_criteo([CRITEO], tmp_path / "out", common=opts(hash_sizes={"C99": 4}))
    assert_nothing_left(tmp_path, "out")


# ---------------------------------------------------------------------------
# malformed lines: one test per case, each with its error text and line number
# ---------------------------------------------------------------------------
GOOD = CRITEO.read_text().splitlines()[0]


def _criteo_with(tmp_path: Path, bad_line: str) -> Path:
    p = tmp_path / "in.tsv"
    p.write_text("\n".join([GOOD, GOOD, bad_line, GOOD]) + "\n")
    return p


@pytest.mark.parametrize(
    "bad_line, message",
    [
        ("0\t1\t2", r"line 3: expected 40 tab-separated columns \(37-39 are padded\), got 3"),
        ("\t".join(GOOD.split("\t") + ["x", "y"]), r"line 3: expected 40 tab-separated columns .*got 42"),
        ("\t".join(GOOD.split("\t")[:36]), r"line 3: expected 40 tab-separated columns .*got 36"),
        ("yes" + GOOD[1:], r"line 3: label \(column 1\) is not 0 or 1: 'yes'"),
        ("2" + GOOD[1:], r"line 3: label \(column 1\) is not 0 or 1: '2'"),
        ("\t".join(["0", "1.5"] + GOOD.split("\t")[2:]), r"line 3: column 2 \(I1\) is not an integer: '1.5'"),
        ("\t".join(GOOD.split("\t")[:14] + ["68fd1e6g"] + GOOD.split("\t")[15:]),
         r"line 3: column 15 \(C1\) is not hexadecimal: '68fd1e6g'"),
        ("\t".join(GOOD.split("\t")[:39] + ["0123456789abcdef0"]),
         r"line 3: column 40 \(C26\) is not hexadecimal: '0123456789abcdef0'"),
    ],
    ids=["too-few-columns", "too-many-columns", "36-columns", "label-text", "label-2", "dense-float", "bad-hex",
         "hex-too-long"],
)
def test_criteo_malformed_line_fails_strict(tmp_path, bad_line, message):
    p = _criteo_with(tmp_path, bad_line)
    with pytest.raises(ImportDataError, match=message) as err:
        import_criteo([p], tmp_path / "out")
    text = str(err.value)
    assert "1 malformed line in the first 4 lines read, more than `max_bad_lines` 0" in text
    assert f"{p} line 3" in text and "pass `max_bad_lines` N" in text
    assert "\n" not in text
    assert_nothing_left(tmp_path, "out")


def test_malformed_line_counts_have_thousands_separators(tmp_path):
    p = tmp_path / "in.tsv"
    bad = "2" + GOOD[1:]
    p.write_text("\n".join([GOOD] * 1000 + [bad] * 1200) + "\n")
    with pytest.raises(ImportDataError) as err:
        import_criteo([p], tmp_path / "out", common=CommonOptions(max_bad_lines=1100))
    assert "1,200 malformed lines in the first 2,200 lines read, more than `max_bad_lines` 1,100" in str(err.value)


def test_criteo_malformed_fixture_lists_every_bad_line(tmp_path):
    with pytest.raises(ImportDataError) as err:
        import_criteo([FIX / "criteo_bad.tsv"], tmp_path / "out")
    text = str(err.value)
    assert "4 malformed lines" in text
    for n in (2, 3, 4, 5):
        assert f"criteo_bad.tsv line {n}:" in text
    assert "criteo_bad.tsv line 1:" not in text and "line 6:" not in text


def test_bad_lines_skipped_and_recorded(tmp_path):
    meta = import_criteo([FIX / "criteo_bad.tsv"], tmp_path / "out", common=opts(max_bad_lines=4))
    assert meta["num_samples"] == 2 and meta["num_bad_lines"] == 4
    on_disk = json.loads((tmp_path / "out" / "dataset.json").read_text())
    assert on_disk["num_bad_lines"] == 4
    assert [b["line"] for b in on_disk["bad_lines"]] == [2, 3, 4, 5]
    assert on_disk["bad_lines"][3]["reason"] == "column 16 (C2) is not hexadecimal: 'zz16a946'"
    assert on_disk["source"]["options"]["max_bad_lines"] == 4


def test_bad_lines_over_limit_fail(tmp_path):
    with pytest.raises(ImportDataError, match=r"4 malformed lines .* more than `max_bad_lines` 3"):
        import_criteo([FIX / "criteo_bad.tsv"], tmp_path / "out", common=opts(max_bad_lines=3))
    assert_nothing_left(tmp_path, "out")


def test_only_first_ten_bad_lines_listed(tmp_path):
    p = tmp_path / "in.tsv"
    p.write_text("\n".join([GOOD] + ["0\t1"] * 15 + [GOOD]) + "\n")
    with pytest.raises(ImportDataError) as err:
        import_criteo([p], tmp_path / "out", common=opts(chunk_bytes=64))
    text = str(err.value)
    assert text.count(": expected 40 tab-separated columns") >= 1
    # strict mode stops after the chunk where the limit was exceeded; with 64-byte
    # chunks the first bad line is alone in its chunk.
    meta = import_criteo([p], tmp_path / "ok", common=opts(max_bad_lines=15))
    assert meta["num_bad_lines"] == 15 and len(meta["bad_lines"]) == 10
    assert [b["line"] for b in meta["bad_lines"]] == list(range(2, 12))
    # dataset.json keeps 10; the error message shows 5 (it is one line on a terminal)
    with pytest.raises(ImportDataError, match=r"15 malformed lines .*\(first 5 shown\)") as err:
        import_criteo([p], tmp_path / "out2", common=opts(max_bad_lines=14))
    assert str(err.value).count(" line ") == 5


def test_all_lines_bad_is_an_error(tmp_path):
    p = tmp_path / "in.tsv"
    p.write_text("0\t1\n1\t2\n")
    with pytest.raises(ImportDataError, match=r"all 2 data lines were malformed"):
        import_criteo([p], tmp_path / "out", common=opts(max_bad_lines=5))
    assert_nothing_left(tmp_path, "out")


# ---------------------------------------------------------------------------
# bad input files
# ---------------------------------------------------------------------------
def test_empty_input(tmp_path):
    p = tmp_path / "empty.tsv"
    p.write_text("")
    with pytest.raises(ImportDataError, match=r"empty.tsv: the input is empty \(no data lines\)"):
        import_criteo([p], tmp_path / "out")
    assert_nothing_left(tmp_path, "out")


def test_empty_gzip_input(tmp_path):
    p = tmp_path / "empty.tsv.gz"
    p.write_bytes(gzip.compress(b""))
    with pytest.raises(ImportDataError, match=r"the input is empty"):
        import_criteo([p], tmp_path / "out")


def _complete_lines_before_cut(cut: bytes) -> int:
    """Complete lines a decompressor recovers from a gzip stream cut short (the reference count)."""
    return zlib.decompressobj(wbits=31).decompress(cut).count(b"\n")


def test_truncated_gzip(tmp_path):
    data = gzip.compress(CRITEO.read_bytes() * 50)
    p = tmp_path / "cut.tsv.gz"
    p.write_bytes(data[: len(data) // 2])
    done = _complete_lines_before_cut(p.read_bytes())
    assert done > 0
    with pytest.raises(ImportDataError, match=rf"cut.tsv.gz: truncated gzip file .*after {done} complete line\(s\)"
                                              r"\); re-download or re-compress"):
        import_criteo([p], tmp_path / "out")
    assert_nothing_left(tmp_path, "out")


def test_truncated_gzip_counts_lines_of_earlier_chunks(tmp_path):
    """Cut after several chunks were yielded: the count adds the lines already read to those of the last piece."""
    data = gzip.compress(CRITEO.read_bytes() * 50)
    p = tmp_path / "cut.tsv.gz"
    p.write_bytes(data[: len(data) * 3 // 4])
    done = _complete_lines_before_cut(p.read_bytes())
    yielded = 0
    with pytest.raises(ImportDataError, match=rf"after {done} complete line\(s\)"):
        for chunk in iter_chunks(p, chunk_bytes=4096):
            yielded += chunk.data.count(b"\n")
    assert 0 < yielded < done


def test_corrupt_gzip(tmp_path):
    data = bytearray(gzip.compress(CRITEO.read_bytes() * 50))
    data[20:60] = b"\xff" * 40
    p = tmp_path / "bad.tsv.gz"
    p.write_bytes(bytes(data))
    with pytest.raises(ImportDataError, match=r"bad.tsv.gz: (corrupt gzip data|truncated gzip)"):
        import_criteo([p], tmp_path / "out")


def test_missing_path(tmp_path):
    with pytest.raises(ImportDataError, match=r"nope.tsv: no such file; check the INPUT path"):
        import_criteo([tmp_path / "nope.tsv"], tmp_path / "out")
    assert_nothing_left(tmp_path, "out")


def test_directory_as_input(tmp_path):
    with pytest.raises(ImportDataError, match=r"is a directory; pass the data file"):
        import_criteo([tmp_path], tmp_path / "out")


@pytest.mark.skipif(os.geteuid() == 0, reason="root can read files without read permission")
def test_unreadable_path(tmp_path):
    p = tmp_path / "locked.tsv"
    shutil.copy(CRITEO, p)
    p.chmod(0)
    with pytest.raises(ImportDataError, match=r"locked.tsv: permission denied"):
        import_criteo([p], tmp_path / "out")


def test_existing_output_needs_overwrite(tmp_path):
    import_criteo([CRITEO], tmp_path / "out")
    with pytest.raises(Exception, match=r"already exists and is not empty; .*`overwrite=True`"):
        import_criteo([CRITEO], tmp_path / "out")
    import_criteo([CRITEO], tmp_path / "out", common=opts(overwrite=True))


def test_iter_chunks_line_numbers(tmp_path):
    p = tmp_path / "x.txt"
    p.write_bytes(b"h\n" + b"".join(b"line%d\n" % i for i in range(1, 50)))
    seen = []
    for c in iter_chunks(p, chunk_bytes=7, skip_lines=1):
        for k, ln in enumerate(c.data.splitlines()):
            seen.append((c.first_line + k, ln))
    assert seen == [(i + 1, b"line%d" % i) for i in range(1, 50)]


@pytest.mark.parametrize("chunk_bytes", [1, 3, 7, 4096])
def test_blank_lines_at_the_very_end_are_not_data(tmp_path, chunk_bytes):
    """An editor's blank lines after the last line are dropped (the strict default refused the file); a blank
    line before other lines is skipped too (tests/test_import_blank_lines.py), the others keep their numbers."""
    p = tmp_path / "x.txt"
    p.write_bytes(b"h\na\n\nb\n\r\n\n")
    got = [(int(c.line_of(k)), ln) for c in iter_chunks(p, chunk_bytes=chunk_bytes, skip_lines=1)
           for k, ln in enumerate(c.data.split(b"\n")[:-1])]
    assert got == [(2, b"a"), (4, b"b")]
    q = tmp_path / "t.csv"
    q.write_text("label,a\n1,x\n0,y\n\n\n")
    meta = import_csv([q], tmp_path / "o", options=CsvOptions(label="label"), common=opts(test_fraction=0.0))
    assert meta["num_samples"] == 2 and meta["num_bad_lines"] == 0


@pytest.mark.parametrize("chunk_bytes", [1, 7, 64, 4096])
@pytest.mark.parametrize("crlf", [False, True])
def test_a_line_longer_than_the_limit_is_malformed_with_its_offset(tmp_path, chunk_bytes, crlf):
    """A line over ``max_line_bytes`` stops the read with its line number and byte offset (counted by hand:
    "ab\\n" + "cd\\n" = 6 bytes before line 3), at any block size; a line at the limit is read whole."""
    nl = b"\r\n" if crlf else b"\n"
    p = tmp_path / "x.txt"
    p.write_bytes(b"ab" + nl + b"cd" + nl + b"x" * 50 + nl + b"ok" + nl)
    whole = b"".join(c.data for c in iter_chunks(p, chunk_bytes=chunk_bytes, max_line_bytes=50))
    assert whole == p.read_bytes()
    with pytest.raises(ImportDataError, match=rf"x.txt line 3 \(starting at byte offset {6 + 2 * crlf}\): malformed "
                                              r"line, more than 49 bytes"):
        list(iter_chunks(p, chunk_bytes=chunk_bytes, max_line_bytes=49))


@pytest.mark.parametrize("chunk_bytes", [1, 64, 4096])
def test_a_newline_less_input_stops_after_the_limit(tmp_path, monkeypatch, chunk_bytes):
    """No newline at all: refused once the limit is passed, not buffered to the end (the stream below would
    give 10 MB; reading stops after about ``max_line_bytes`` plus a block)."""
    served = 0

    class Endless:
        def read1(self, n):
            nonlocal served
            served += n
            return b"\0" * n

        def close(self):
            pass

    import gmp.datasets.streaming as imp

    p = tmp_path / "zeros"
    p.write_bytes(b"\0")
    monkeypatch.setattr(imp, "_open", lambda path: (Endless(), open(path, "rb")))
    with pytest.raises(ImportDataError, match=r"zeros line 1 \(starting at byte offset 0\): malformed line"):
        list(iter_chunks(p, chunk_bytes=chunk_bytes, max_line_bytes=1000))
    assert served <= 1000 + 2 * chunk_bytes


def test_a_header_line_longer_than_the_limit_is_refused(tmp_path):
    from gmp.datasets.streaming import read_header

    p = tmp_path / "h.csv"
    p.write_bytes(b"a," * 40 + b"b\n1,2\n")
    assert read_header(p, max_line_bytes=81) == b"a," * 40 + b"b"
    with pytest.raises(ImportDataError, match=r"h.csv line 1 \(starting at byte offset 0\): malformed line"):
        read_header(p, max_line_bytes=80)


@pytest.mark.parametrize("fmt", ["criteo", "libsvm", "libffm"])
def test_import_of_a_line_over_16_mib_is_one_error_line(tmp_path, fmt):
    """The documented limit, through the CLI: one ``error:`` line naming the line and its offset (the old reader
    buffered the whole line, re-copying it per block: on /dev/zero without end)."""
    from typer.testing import CliRunner

    from cli.main import app
    from gmp.datasets.streaming import MAX_LINE_BYTES

    assert MAX_LINE_BYTES == 16 << 20
    p = tmp_path / "long.txt"
    good = {"criteo": b"0" + b"\t" * 39 + b"\n", "libsvm": b"1 3:1\n", "libffm": b"1 0:3:1\n"}[fmt]
    with open(p, "wb") as f:
        f.write(good)
        f.write(b"7" * (MAX_LINE_BYTES + 2))
        f.write(b"\n" + good)
    res = CliRunner().invoke(app, ["data", "import", fmt, str(p), "--out", str(tmp_path / "o")])
    assert res.exit_code == 2
    lines = res.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), res.output
    assert f"line 2 (starting at byte offset {len(good)}): malformed line, more than 16 MiB" in lines[0]
    assert not (tmp_path / "o").exists()


# ---------------------------------------------------------------------------
# vocabulary
# ---------------------------------------------------------------------------
def test_vocabulary_orders_by_frequency_then_first_seen():
    v = Vocabulary(min_count=2)
    a = v.add_field("A")
    b = v.add_field("B")
    pa = v.lookup(a, np.array([5, 9, 9, 7, 5, 3, 3, 0], np.uint64), np.array([1, 1, 1, 1, 1, 1, 1, 0], bool))
    pb = v.lookup(b, np.array([1, 1], np.uint64), np.array([1, 1], bool))
    pa2 = v.lookup(a, np.array([3], np.uint64), np.array([1], bool))
    fields, n, remap = v.finish()
    # A: 3 x3 -> 2, then 5 and 9 (x2 each; 5 seen first) -> 3, 4; 7 (x1) rare -> 1; missing -> 0
    assert remap[pa].tolist() == [3, 4, 4, 1, 3, 2, 2, 0]
    assert remap[pa2].tolist() == [2]
    assert (fields[0].num_values, fields[1].offset) == (5, 5)
    assert remap[pb].tolist() == [7, 7]
    assert n == 8


def _splitmix64(k: int) -> int:
    """The SplitMix64 finaliser in plain Python integers (the hashed bucket's mixer, derived apart)."""
    m = (1 << 64) - 1
    k = ((k ^ (k >> 30)) * 0xBF58476D1CE4E5B9) & m
    k = ((k ^ (k >> 27)) * 0x94D049BB133111EB) & m
    return k ^ (k >> 31)


def test_hashed_field_memory_follows_the_data_not_its_size():
    """--hash C=SIZE gave every bucket a provisional id and a remap entry (16-25 bytes each: 2.5 GB for 500
    rows at 1e8 buckets); a hashed field's ids are a span mapped by an offset, so a huge SIZE costs nothing.
    Values, missing and the fields around it keep the ids they had."""
    import tracemalloc

    size = 10_000_000  # the old code allocated over 200 MB here
    keys = np.array([7, 2**64 - 1, 7, 0, 12345], np.uint64)
    tracemalloc.start()
    try:
        v = Vocabulary(hash_sizes={"H": size})
        a = v.add_field("A")
        h = v.add_field("H")
        b = v.add_field("B")
        pa = v.lookup(a, np.array([5, 6, 5], np.uint64), np.ones(3, bool))
        ph = v.lookup(h, keys, np.array([1, 1, 1, 0, 1], bool))
        pb = v.lookup(b, np.array([9], np.uint64), np.ones(1, bool))
        fields, n, remap = v.finish()
        got_a, got_h, got_b = remap[pa].tolist(), remap[ph].tolist(), remap[pb].tolist()
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 4 << 20, peak
    # A: missing 0, rare 1, 5 -> 2, 6 -> 3; H from 4: missing 4, buckets 5..4+size; B after it
    assert got_a == [2, 3, 2]
    assert got_h == [4 + 1 + _splitmix64(7) % size, 4 + 1 + _splitmix64(2**64 - 1) % size,
                     4 + 1 + _splitmix64(7) % size, 4, 4 + 1 + _splitmix64(12345) % size]
    hb = 4 + size + 1
    assert got_b == [hb + 2] and n == hb + 3
    assert [(f.name, f.offset, f.num_values, f.hash_buckets) for f in fields] == [
        ("A", 0, 4, None), ("H", 4, size + 1, size), ("B", hb, 3, None)]


def test_vocabulary_rejects_bad_options():
    with pytest.raises(ImportDataError, match="`min_count` must be >= 1"):
        Vocabulary(min_count=0)
    with pytest.raises(ImportDataError, match="the size must be a positive integer"):
        Vocabulary(hash_sizes={"C1": 0})


def test_hash_strings_is_stable():
    k = hash_strings(["a", "b", "a"])
    assert k[0] == k[2] != k[1]
    assert hash_strings([b"a"])[0] == k[0]


# ---------------------------------------------------------------------------
# avazu
# ---------------------------------------------------------------------------
def test_avazu_hour_split(tmp_path):
    meta = import_avazu([FIX / "avazu_small.csv"], tmp_path / "out")
    ds = load_dataset(tmp_path / "out")
    names = [f.name for f in ds.fields]
    assert "id" not in names and "click" not in names and "hour" not in names
    assert names[-2:] == ["hour_of_day", "weekday"] and len(names) == 23
    assert ds.labels.tolist() == [0, 0, 1, 0, 1]
    assert ds.dense is None
    f = {x.name: x for x in ds.fields}
    # hours 00, 00, 23, 07, 16 -> local ids by frequency: 0h -> 2, 23h -> 3, 7h -> 4, 16h -> 5
    hod = [next(i for i in r if f["hour_of_day"].offset <= i < f["hour_of_day"].offset + 6) - f["hour_of_day"].offset
           for r in rows_of(ds)]
    assert hod == [2, 2, 3, 4, 5]
    # 2014-10-21 and -22 are Tue/Wed, 25 Sat, 26 Sun: Tue x2 -> 2, Wed -> 3, Sat -> 4, Sun -> 5
    wd = [next(i for i in r if f["weekday"].offset <= i < f["weekday"].offset + 6) - f["weekday"].offset
          for r in rows_of(ds)]
    assert wd == [2, 2, 3, 4, 5]
    # device_ip is unique per row except none repeated: 5 values + missing + rare
    assert f["device_ip"].num_values == 7
    assert meta["source"]["options"]["split_hour"] is True


def test_avazu_no_split_keeps_hour(tmp_path):
    import_avazu([FIX / "avazu_small.csv"], tmp_path / "out", split_hour=False)
    ds = load_dataset(tmp_path / "out")
    f = {x.name: x for x in ds.fields}
    assert "hour" in f and "weekday" not in f
    assert f["hour"].num_values == 2 + 4  # 14102100 (x2), 14102223, 14102507, 14102616


@pytest.mark.parametrize(
    "edit, message",
    [
        (lambda c: c[:1] + ["2"] + c[2:], r"line 3: column 2 \(click\) is not 0 or 1: '2'"),
        (lambda c: c[:1] + ["x"] + c[2:], r"line 3: label column 'click' is not a number: 'x'"),
        (lambda c: c[:2] + ["14023100"] + c[3:], r"line 3: column 3 \(hour\) is not a YYMMDDHH timestamp: '14023100'"),
        (lambda c: c[:2] + ["141021"] + c[3:], r"line 3: column 3 \(hour\) is not a YYMMDDHH timestamp: '141021'"),
        (lambda c: c[:2] + ["14102124"] + c[3:], r"line 3: column 3 \(hour\) is not a YYMMDDHH"),
        (lambda c: c[:10], r"line 3: expected 24 comma-separated columns, got 10"),
    ],
    ids=["click-2", "click-text", "feb-31", "short-hour", "hour-24", "columns"],
)
def test_avazu_malformed(tmp_path, edit, message):
    lines = (FIX / "avazu_small.csv").read_text().splitlines()
    lines[2] = ",".join(edit(lines[2].split(",")))
    p = tmp_path / "in.csv"
    p.write_text("\n".join(lines) + "\n")
    with pytest.raises(ImportDataError, match=message):
        import_avazu([p], tmp_path / "out")
    assert_nothing_left(tmp_path, "out")


def test_avazu_without_click_column(tmp_path):
    lines = (FIX / "avazu_small.csv").read_text().splitlines()
    p = tmp_path / "test.csv"
    p.write_text("\n".join(",".join(c for k, c in enumerate(l.split(",")) if k != 1) for l in lines) + "\n")
    with pytest.raises(ImportDataError, match=r"has no 'click' column \(the competition's test file has no labels\)"):
        import_avazu([p], tmp_path / "out")


def test_avazu_header_only_is_empty(tmp_path):
    p = tmp_path / "h.csv"
    p.write_text((FIX / "avazu_small.csv").read_text().splitlines()[0] + "\n")
    with pytest.raises(ImportDataError, match="the input is empty"):
        import_avazu([p], tmp_path / "out")


# ---------------------------------------------------------------------------
# csv
# ---------------------------------------------------------------------------
def test_csv_roles_and_values(tmp_path):
    o = CsvOptions(label="income", label_positive=">50K", dense=["age", "hours"], multi=["tags"])
    meta = import_csv([FIX / "mixed_small.csv"], tmp_path / "out", options=o)
    ds = load_dataset(tmp_path / "out")
    assert [(f.name, f.kind) for f in ds.fields] == [("age", "dense"), ("hours", "dense"), ("workclass", "categorical"),
                                                    ("education", "categorical"), ("tags", "multi")]
    assert ds.labels.tolist() == [0, 0, 1, 1, 0]
    # workclass: Private x3 (one quoted) -> 2, State-gov -> 3, Self-emp -> 4 (offset 0)
    # education: Bachelors x3 -> 7, HS-grad -> 8, 11th -> 9 (offset 5)
    # tags: a x3 -> 12, b x2 -> 13, c x2 -> 14, empty -> missing 10 (offset 10); 'a|c|a' dedupes
    assert rows_of(ds) == [[3, 7, 12, 13], [4, 7, 10], [2, 8, 13], [2, 9, 12, 14], [2, 7, 14]]
    np.testing.assert_allclose(ds.dense[:, 0], np.log1p([39, 50, 38, 53, 28]), rtol=1e-6)
    assert ds.dense[4, 1] == 0.0  # empty hours
    assert meta["source"]["options"]["label_positive"] == ">50K"


def test_csv_numeric_label_and_default_categoricals(tmp_path):
    p = tmp_path / "t.tsv"
    p.write_text("y\ta\tb\n1\tx\tp\n-1\ty\tp\n0.7\tx\tq\n")
    import_csv([p], tmp_path / "out", options=CsvOptions(label="y", dense_transform="none"))
    ds = load_dataset(tmp_path / "out")
    assert ds.labels.tolist() == [1, 0, 1]
    assert [f.name for f in ds.fields] == ["a", "b"]


def test_csv_unnamed_columns_are_not_imported(tmp_path, caplog):
    """A separator at the end of every line (header included) gave a field with an empty name, missing in
    every row; two such columns were refused as duplicates. Unnamed columns are left out, with a warning."""
    import logging

    p = tmp_path / "t.csv"
    p.write_text("y,a,,b,,\n1,x,,p,,\n0,y,,p,,\n1,x,,q,,\n")
    with caplog.at_level(logging.WARNING, logger="gmp.datasets.csvfmt"):
        import_csv([p], tmp_path / "out", options=CsvOptions(label="y"), common=opts(test_fraction=0.0))
    ds = load_dataset(tmp_path / "out")
    assert [f.name for f in ds.fields] == ["a", "b"]
    # a: x x2 -> 2, y -> 3 (offset 0); b: p x2 -> 6, q -> 7 (offset 4)
    assert rows_of(ds) == [[2, 6], [3, 6], [2, 7]]
    assert "column(s) 3, 5, 6 of" in caplog.text and "have no name" in caplog.text


@pytest.mark.parametrize("chunk_bytes", [1 << 20, 8])
def test_csv_quoted_separator_or_newline_is_malformed_not_a_row(tmp_path, chunk_bytes):
    """A quoted cell holding the separator or a newline is not supported: the line that opens it is
    malformed, and so are the lines its newlines made (the text after a quoted newline was read as a row
    of its own). Chunks of 8 bytes: the open cell is carried from one chunk to the next."""
    p = tmp_path / "q.csv"
    p.write_text('label,a,b\n1,"a,b"\n0,"x""y",z\n1,42",q\n0,"m\nn\no",p\n1,ok,ok\n')
    import_csv([p], tmp_path / "out", options=CsvOptions(label="label"),
               common=opts(test_fraction=0.0, max_bad_lines=10, chunk_bytes=chunk_bytes))
    ds = load_dataset(tmp_path / "out")
    # kept: line 3 (a quoted cell with an escaped quote), 4 (a quote inside an unquoted cell is text), 8
    # a: x""y -> 2, 42" -> 3, ok -> 4 (offset 0); b: z -> 7, q -> 8, ok -> 9 (offset 5)
    assert rows_of(ds) == [[2, 7], [3, 8], [4, 9]] and ds.labels.tolist() == [0, 1, 1]
    bad = [(b["line"], b["reason"].split(" (")[0]) for b in ds.meta["bad_lines"]]
    assert bad == [(2, "column 2 opens a double quote it does not close"),
                   (5, "column 2 opens a double quote it does not close"),
                   (6, "goes on with a quoted cell an earlier line opened"),
                   (7, "goes on with a quoted cell an earlier line opened")]


def test_csv_cells_with_spaces_and_quotes_read_as_their_values(tmp_path, caplog):
    """UCI Adult separates cells with ', ': the label value ' >50K' is '>50K' (every label was 0), and a
    quoted number '"3"' is 3 (every line was malformed); categorical values keep their spaces (their ids)."""
    import logging

    p = tmp_path / "adult.csv"
    p.write_text('age, workclass, hours, income\n39, State-gov, 40, <=50K\n50, Self-emp, "13", >50K\n'
                 '38, Private, 40, ">50K"\n')
    import_csv([p], tmp_path / "a", options=CsvOptions(label="income", dense=["age", "hours"], label_positive=">50K",
                                                       dense_transform="none"), common=opts(test_fraction=0.0))
    ds = load_dataset(tmp_path / "a")
    assert ds.labels.tolist() == [0, 1, 1]
    assert ds.dense[:, 1].tolist() == [40, 13, 40]
    q = tmp_path / "q.csv"
    q.write_text('"lab","a","d"\n"1","x","3"\n"0","y","4"\n')
    import_csv([q], tmp_path / "q", options=CsvOptions(label="lab", dense=["d"], dense_transform="none"),
               common=opts(test_fraction=0.0))
    ds = load_dataset(tmp_path / "q")
    assert ds.labels.tolist() == [1, 0] and ds.dense[:, 0].tolist() == [3, 4]
    with caplog.at_level(logging.WARNING):
        import_csv([p], tmp_path / "none", options=CsvOptions(label="income", dense=["age", "hours"],
                                                              label_positive="yes"), common=opts(test_fraction=0.0))
    assert "--label-positive 'yes' matched no row's label" in caplog.text


def test_a_first_line_naming_the_label_is_a_header(tmp_path):
    """Numeric column names, a header-only file, a header repeated by cat: each was refused as 'no header line'
    with advice that failed; a first line naming --label is the header."""
    from gmp.datasets.dispatch import import_dataset

    for name, text, said in (("num", "label,1,2\n1,x,y\n0,z,y\n", None),
                             ("only", "label,a,b\n", "the input is empty"),
                             ("twice", "label,a,b\n1,x,y\nlabel,a,b\n0,z,y\n", "line 3: label column 'label' is not")):
        p = tmp_path / f"{name}.csv"
        p.write_text(text)
        call = lambda: import_dataset("csv", [p], tmp_path / name, options=CsvOptions(label="label"),  # noqa: E731
                                      common=opts(test_fraction=0.0))
        if said is None:
            assert call()["num_samples"] == 2
        else:
            with pytest.raises(ImportDataError, match=said):
                call()


def test_a_test_input_that_is_an_input_by_another_spelling_is_refused(tmp_path, monkeypatch):
    from gmp.datasets.dispatch import import_dataset

    p = tmp_path / "tr.csv"
    p.write_text("label,a\n1,x\n0,y\n")
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ImportDataError, match="is given both as an input and as a test input"):
        import_dataset("csv", ["tr.csv"], tmp_path / "o", test_inputs=[tmp_path / "." / "tr.csv"],
                       options=CsvOptions(label="label"))


@pytest.mark.parametrize(
    "line, message",
    [
        ("53,Private,11th", r"line 3: expected 6 comma-separated columns, got 3"),
        ("50,Self-emp,Bachelors,13,,zero", r"line 3: label column 'income' is not a number: 'zero'"),
        ("50,Self-emp,Bachelors,13,,", r"line 3: label column 'income' is empty"),
        ("38,Private,HS-grad,forty,b,1", r"line 3: column 4 \(hours\) is not a number: 'forty'"),
    ],
    ids=["columns", "label-text", "label-empty", "dense-text"],
)
def test_csv_malformed(tmp_path, line, message):
    lines = (FIX / "mixed_bad.csv").read_text().splitlines()
    p = tmp_path / "in.csv"
    p.write_text("\n".join([lines[0], lines[1], line, lines[1]]) + "\n")
    o = CsvOptions(label="income", dense=["age", "hours"], multi=["tags"])
    with pytest.raises(ImportDataError, match=message):
        import_csv([p], tmp_path / "out", options=o)


def test_csv_fixture_bad_lines_skipped(tmp_path):
    o = CsvOptions(label="income", dense=["age", "hours"], multi=["tags"])
    meta = import_csv([FIX / "mixed_bad.csv"], tmp_path / "out", options=o, common=opts(max_bad_lines=4))
    assert meta["num_samples"] == 1 and [b["line"] for b in meta["bad_lines"]] == [3, 4, 5, 6]


def test_csv_unknown_column(tmp_path):
    with pytest.raises(ImportDataError, match=r"`dense` names column 'nope', which is not in the header"):
        import_csv([FIX / "mixed_small.csv"], tmp_path / "out", options=CsvOptions(label="income", dense=["nope"]))
    with pytest.raises(ImportDataError, match=r"csv import needs `label` COLUMN"):
        CsvOptions()


# ---------------------------------------------------------------------------
# libsvm / libffm
# ---------------------------------------------------------------------------
def test_libsvm_field_is_token_position(tmp_path):
    import_libsvm([FIX / "small.libsvm"], tmp_path / "out")
    ds = load_dataset(tmp_path / "out")
    assert [(f.name, f.num_values, f.offset) for f in ds.fields] == [("f1", 4, 0), ("f2", 3, 4), ("f3", 4, 7)]
    # f1: 3 (x3) -> 2, 5 -> 3; f2: 17 -> 6 (4:0 is dropped: value 0); f3: 120 -> 9, 9 -> 10
    assert rows_of(ds) == [[2, 6, 9], [3, 6], [2, 10], [2]]
    assert ds.labels.tolist() == [1, 0, 0, 1]  # label > 0


def test_libsvm_many_fields_and_a_chunk_of_zero_values(tmp_path):
    """Fields interleave across lines and chunks (they were grouped by one mask per field: quadratic in long
    lines); a chunk whose lines hold only zero values has no token at all."""
    p = tmp_path / "t.libsvm"
    p.write_text("1 7:0 8:0\n0 9:1 5:1 9:1\n1 9:1 6:1\n0 4:1\n1 3:0\n")
    import_libsvm([p], tmp_path / "out", common=opts(test_fraction=0.0, chunk_bytes=10))
    ds = load_dataset(tmp_path / "out")
    assert [(f.name, f.num_values, f.offset) for f in ds.fields] == [("f1", 4, 0), ("f2", 4, 4), ("f3", 3, 8)]
    # f1: 9 (x2) -> 2, 4 -> 3; f2: 5 -> 6, 6 -> 7 (first seen first); f3: 9 -> 10; lines 1 and 5 read no id
    assert rows_of(ds) == [[], [2, 6, 10], [2, 7], [3], []]


def test_libffm_given_fields_and_multi(tmp_path):
    import_libsvm([FIX / "small.libffm"], tmp_path / "out", ffm=True, fmt="libffm")
    ds = load_dataset(tmp_path / "out")
    assert [(f.name, f.kind, f.num_values) for f in ds.fields] == [("f0", "categorical", 4), ("f1", "multi", 4),
                                                                   ("f2", "categorical", 4)]
    assert rows_of(ds) == [[2, 6, 10], [3, 6, 7], [2, 11]]


@pytest.mark.parametrize(
    "line, ffm, message",
    [
        ("yes 5:1", False, r"line 2: label is not a number: 'yes'"),
        ("0 3:1 abc", False, r"line 2: token 2 'abc' is not idx:val"),
        ("1 3:x", False, r"line 2: value of token 1 is not a number: 'x'"),
        ("0 -3:1", False, r"line 2: index in '-3:1' is not a non-negative integer"),
        ("0 3.5:1", False, r"line 2: index in '3.5:1' is not a non-negative integer"),
        ("1 3:1", True, r"line 2: token 1 '3:1' is not field:idx:val"),
        ("0 a:3:1", True, r"line 2: field in 'a:3:1' is not a non-negative integer"),
        # more digits than int() converts (4,300): still a malformed line, never int()'s ValueError
        ("0 " + "1" * 5000 + ":1", False, r"line 2: index in '1{24}' is larger than 18446744073709551615;"),
        ("0 " + "1" * 5000 + ":3:1", True, r"line 2: field in '1{24}' is larger than 2147483647;"),
        ("0 0:" + "9" * 5000 + ":1", True, r"line 2: index in '0:9{22}' is larger than 18446744073709551615;"),
        ("0 18446744073709551616:1", False, r"line 2: index in '18446744073709551616:1' is larger than "
                                            r"18446744073709551615;"),
    ],
    ids=["label", "no-colon", "value", "negative-index", "float-index", "ffm-two-parts", "ffm-field",
         "huge-index", "huge-field", "huge-ffm-index", "index-2**64"],
)
def test_libsvm_malformed(tmp_path, line, ffm, message):
    p = tmp_path / "in.txt"
    good = "1 0:3:1" if ffm else "1 3:1"
    p.write_text(f"{good}\n{line}\n{good}\n")
    with pytest.raises(ImportDataError, match=message):
        import_libsvm([p], tmp_path / "out", ffm=ffm)
    assert_nothing_left(tmp_path, "out")


def test_libsvm_index_with_leading_zeros_keeps_its_value(tmp_path):
    """Leading zeros do not count towards an index's size: 5,000 zeros then 7 is the index 7."""
    p, q = tmp_path / "a.txt", tmp_path / "b.txt"
    p.write_text("1 " + "0" * 5000 + "7:1\n0 3:1\n")
    q.write_text("1 7:1\n0 3:1\n")
    a = import_libsvm([p], tmp_path / "a", common=CommonOptions(test_fraction=0.0))
    b = import_libsvm([q], tmp_path / "b", common=CommonOptions(test_fraction=0.0))
    assert a["arrays_sha256"] == b["arrays_sha256"]


# ---------------------------------------------------------------------------
# movielens
# ---------------------------------------------------------------------------
def test_movielens_atomic_and_classic_agree(tmp_path):
    a = import_movielens([FIX / "ml_atomic"], tmp_path / "a")
    c = import_movielens([FIX / "ml_classic" / "u.data"], tmp_path / "c")
    assert a["sha256"] == c["sha256"]
    assert a["source"]["options"]["layout"] == "atomic" and c["source"]["options"]["layout"] == "classic"
    ds = load_dataset(tmp_path / "a")
    f = {x.name: x for x in ds.fields}
    assert list(f) == ["user_id", "item_id", "age", "gender", "occupation", "zip_code", "release_year", "class"]
    assert f["class"].kind == "multi"
    assert ds.labels.tolist() == [1, 0, 1, 0, 1, 0, 1]  # rating >= 4
    rows = rows_of(ds)
    # rating 7: user 4 has no profile -> missing age/gender/occupation/zip
    for name in ("age", "gender", "occupation", "zip_code"):
        assert f[name].missing_id in rows[6]
    # item 12 (rating 4) has no genres -> missing class; item 13 has no year -> missing year
    assert f["class"].missing_id in rows[3]
    assert f["release_year"].missing_id in rows[4]
    # item 10 has 3 genres: Animation, Children's, Comedy (ids of the class field)
    cls = [i for i in rows[0] if f["class"].offset <= i < f["class"].offset + f["class"].num_values]
    assert len(cls) == 3
    # Comedy appears with items 10 (x3 ratings) and 13 (x1): most frequent -> local 2
    assert f["class"].offset + 2 in cls


def test_movielens_threshold_and_ignore(tmp_path):
    import_movielens([FIX / "ml_atomic" / "ml.inter"], tmp_path / "a", rating_threshold=5, ignore=["zip_code"])
    ds = load_dataset(tmp_path / "a")
    assert ds.labels.tolist() == [1, 0, 0, 0, 0, 0, 1]
    names = [x.name for x in ds.fields]
    assert "zip_code" not in names and "movie_title" in names  # ignore replaces the default list
    with pytest.raises(ImportDataError, match="`ignore` names 'zipcode', which no file has; the columns are .*zip_code"):
        import_movielens([FIX / "ml_atomic" / "ml.inter"], tmp_path / "b", ignore=["zipcode"])  # a typo
    with pytest.raises(ImportDataError, match="`ignore` applies to the atomic layout"):
        import_movielens([FIX / "ml_classic" / "u.data"], tmp_path / "c", ignore=["zip_code"])  # was ignored


def test_movielens_malformed(tmp_path):
    d = tmp_path / "ml"
    shutil.copytree(FIX / "ml_atomic", d)
    with open(d / "ml.inter", "a") as fh:
        fh.write("5\t10\tfive\t1\n5\t10\n")
    with pytest.raises(ImportDataError, match=r"line 9: rating \(column 3\) is not a number: 'five'.*"
                                              r"line 10: expected 4 tab-separated columns, got 2"):
        import_movielens([d], tmp_path / "out")
    meta = import_movielens([d], tmp_path / "out", common=opts(max_bad_lines=2))
    assert meta["num_samples"] == 7 and meta["num_bad_lines"] == 2


def test_movielens_bad_paths(tmp_path):
    with pytest.raises(ImportDataError, match=r"holds neither a RecBole '\*.inter' file nor a classic 'u.data'"):
        import_movielens([tmp_path], tmp_path / "out")
    p = tmp_path / "x.inter"
    p.write_text("user_id\titem_id\n1\t2\n")
    with pytest.raises(ImportDataError, match=r"header column 'user_id' is not 'name:type'"):
        import_movielens([p], tmp_path / "out")


# where `gmp data fetch movielens-100k` puts it by default (repo-relative), or $GMP_ML100K_RAW
ML100K = Path(os.environ.get("GMP_ML100K_RAW", Path(__file__).resolve().parents[1] / "data" / "ml-100k-raw"))


@pytest.mark.skipif(not (ML100K / "ml-100k.inter").is_file(),
                    reason=f"real MovieLens-100K not fetched at {ML100K} (gmp data fetch movielens-100k)")
def test_real_movielens_100k(tmp_path):
    meta = import_movielens([ML100K], tmp_path / "ml")
    assert meta["num_samples"] == 100_000 and meta["num_bad_lines"] == 0
    f = {x["name"]: x for x in meta["fields"]}
    assert f["user_id"]["num_values"] == 943 + 2 and f["item_id"]["num_values"] == 1682 + 2
    assert f["gender"]["num_values"] == 2 + 2
    assert 0.5 < meta["label_rate"] < 0.6


def test_unreadable_path_message(tmp_path, monkeypatch):
    # Runs as root too: pretend the permission check fails.
    import gmp.datasets.streaming as imp

    monkeypatch.setattr(imp.os, "access", lambda path, mode: False)
    with pytest.raises(ImportDataError, match=r"criteo_small.tsv: permission denied; make the file readable"):
        import_criteo([CRITEO], tmp_path / "out")
    assert_nothing_left(tmp_path, "out")


@pytest.mark.parametrize("name, run", [
    ("criteo", lambda o: import_criteo([CRITEO], o)),
    ("avazu", lambda o: import_avazu([FIX / "avazu_small.csv"], o)),
    ("csv", lambda o: import_csv([FIX / "mixed_small.csv"], o, options=CsvOptions(label="income", label_positive=">50K",
                                                                             multi=["tags"]))),
    ("libsvm", lambda o: import_libsvm([FIX / "small.libsvm"], o)),
    ("libffm", lambda o: import_libsvm([FIX / "small.libffm"], o, ffm=True)),
    ("movielens", lambda o: import_movielens([FIX / "ml_classic"], o)),
])
def test_every_sample_is_sorted_and_duplicate_free(tmp_path, name, run):
    run(tmp_path / "out")
    ds = load_dataset(tmp_path / "out")
    for r in rows_of(ds):
        assert r == sorted(set(r))
    # every id lies inside the range of exactly one field, and each field is used once per
    # sample unless it is multi-valued
    for r in rows_of(ds):
        owners = [next(f.name for f in ds.categorical_fields if f.offset <= i < f.offset + f.num_values) for i in r]
        single = [o for o in owners if next(f for f in ds.fields if f.name == o).kind == "categorical"]
        assert len(single) == len(set(single))


# ---------------------------------------------------------------------------
# property: any well-formed Criteo text imports exactly like the reference,
# whatever the block size
# ---------------------------------------------------------------------------

_hexes = st.sampled_from(["", "0", "ff", "68fd1e64", "80E26C9B", "deadbeef", "0123456789abcdef"])
_ints = st.one_of(st.just(""), st.integers(-3, 10**6).map(str))


@st.composite
def criteo_rows(draw):
    n = draw(st.integers(1, 12))
    lines = []
    for _ in range(n):
        cols = [draw(st.sampled_from(["0", "1"]))] + [draw(_ints) for _ in range(13)] + \
               [draw(_hexes) for _ in range(26)]
        strip = draw(st.integers(0, 3))
        while strip and cols[-1] == "":  # published copies drop trailing empty columns
            cols.pop()
            strip -= 1
        lines.append("\t".join(cols))
    return "\n".join(lines) + "\n"


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(text=criteo_rows(), min_count=st.integers(1, 3), chunk=st.integers(1, 400))
def test_criteo_property_matches_reference(tmp_path_factory, text, min_count, chunk):
    d = tmp_path_factory.mktemp("p")
    src = d / "in.tsv"
    src.write_text(text)
    import_criteo([src], d / "out", common=opts(min_count=min_count, chunk_bytes=chunk))
    ds = load_dataset(d / "out")
    labels, dense, rows, sizes, total = reference_criteo(src, min_count)
    assert ds.labels.tolist() == labels
    np.testing.assert_allclose(ds.dense, dense, rtol=1e-6)
    assert rows_of(ds) == rows
    assert ds.num_embeddings == total


@pytest.mark.parametrize("fixture, run, bad_lines", [
    ("criteo_bad.tsv", lambda p, o, c: import_criteo([p], o, common=c), [2, 3, 4, 5]),
    ("avazu_bad.csv", lambda p, o, c: import_avazu([p], o, common=c), [3, 4, 5]),
    ("bad.libsvm", lambda p, o, c: import_libsvm([p], o, common=c), [2, 3, 4, 5]),  # line 6 is blank: skipped
    ("bad.libffm", lambda p, o, c: import_libsvm([p], o, ffm=True, common=c), [2, 3]),
    ("mixed_bad.csv", lambda p, o, c: import_csv([p], o, options=CsvOptions(label="income", dense=["age", "hours"],
                                                                          multi=["tags"]), common=c), [3, 4, 5, 6]),
])
def test_malformed_fixtures_strict_and_skipping(tmp_path, fixture, run, bad_lines):
    p = FIX / fixture
    with pytest.raises(ImportDataError) as err:
        run(p, tmp_path / "strict", opts())
    for n in bad_lines:
        assert f"{fixture} line {n}: " in str(err.value)
    assert_nothing_left(tmp_path, "strict")
    meta = run(p, tmp_path / "skip", opts(max_bad_lines=len(bad_lines)))
    assert [b["line"] for b in meta["bad_lines"]] == bad_lines
    assert meta["num_bad_lines"] == len(bad_lines)
    assert meta["source"].get("num_blank_lines", 0) == (fixture == "bad.libsvm")


@settings(max_examples=200, deadline=None)
@given(st.lists(st.lists(st.integers(0, 50), max_size=40), max_size=30))
def test_sort_unique_rows_matches_a_per_sample_sorted_set(rows):
    # the writer's per-sample sort (multi-valued fields, --extend) against Python's sorted(set(row));
    # rows above 32 ids take the np.sort branch, the others the insertion sort
    from gmp.datasets.format import sort_unique_rows

    ids = np.array([v for r in rows for v in r], dtype=np.int32)
    lens = np.array([len(r) for r in rows], dtype=np.int64)
    out = np.empty_like(ids)
    out_lens = np.empty(len(rows), dtype=np.int64)
    n = sort_unique_rows(ids, lens, out, out_lens)
    expect = [sorted(set(r)) for r in rows]
    assert out_lens.tolist() == [len(r) for r in expect]
    assert out[:n].tolist() == [v for r in expect for v in r]


@pytest.mark.parametrize("ffm, text", [(False, "1\n0\n1\n"), (False, "1 3:0 5:0\n0 4:0\n"), (True, "1 0:3:0\n0\n")],
                         ids=["labels-only", "zero-values", "ffm-zero-values"])
def test_libsvm_without_features_is_refused(tmp_path, ffm, text):
    """A file whose lines hold no present token imported 0 fields and 0 embeddings (csv refuses the same)."""
    p = tmp_path / "in.txt"
    p.write_text(text)
    fmt, expect = ("libffm", "field:idx:val") if ffm else ("libsvm", "idx:val")
    with pytest.raises(ImportDataError) as err:
        import_libsvm([p], tmp_path / "out", ffm=ffm, fmt=fmt)
    assert str(err.value) == (f"{p}: no features to import: every line is a label alone or its tokens' values are "
                              f"all 0 (a token of value 0 is absent); pass a {fmt} file whose lines hold {expect} "
                              f"tokens with non-zero values.")
    assert_nothing_left(tmp_path, "out")
