"""Issue 17 items 2-4: checkpoints that survive a kill at any point, never run code when read,
and refuse every corruption in one line (each test failed on the main branch before the fix)."""

from __future__ import annotations

import dataclasses
import errno
import json
import logging
import os
import shutil
import zipfile
from pathlib import Path

import numpy as np
import pytest
import torch

from gmp.errors import GmpError, TrainingError
from gmp.train import checkpoint as ck
from gmp.train.run import train
from train_data import TWO_WORKER_CONFIG as CFG, make_two_worker_run, train_two_worker_run as run

GOLDEN = Path(__file__).parent / "data"


pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    return make_two_worker_run(tmp_path_factory.mktemp("ck"))


def one_line(exc: pytest.ExceptionInfo) -> str:
    msg = str(exc.value)
    assert "\n" not in msg and isinstance(exc.value, GmpError), msg
    return msg


@pytest.fixture
def saved(setup, tmp_path):
    """A checkpoint directory after one epoch (latest -> epoch 2 step 0)."""
    ckdir = tmp_path / "ck"
    run(setup, ckdir)
    return ckdir


# --------------------------------------------------------------------------- item 2: crash windows
@pytest.mark.parametrize("when", ["before", "after"])
@pytest.mark.parametrize("point", [("os", "replace", 1), ("os", "replace", 2), ("os", "replace", 3),
                                   ("os", "rename", 1), ("os", "symlink", 1), ("shutil", "rmtree", 1),
                                   ("shutil", "rmtree", 2), ("shutil", "rmtree", 3)])
def test_a_kill_at_any_point_of_a_save_leaves_a_resumable_checkpoint(setup, saved, point, when, monkeypatch, caplog):
    """Kill (SystemExit) just before or just after the nth call of a filesystem operation."""
    full = run(setup, saved.parent / "ref", epochs=2)
    mod = {"os": os, "shutil": shutil}[point[0]]
    real, calls = getattr(mod, point[1]), {"n": 0}

    def killed(*a, **k):
        calls["n"] += 1
        if calls["n"] == point[2] and when == "before":
            raise SystemExit("killed")
        out = real(*a, **k)
        if calls["n"] == point[2]:
            raise SystemExit("killed")
        return out

    monkeypatch.setattr(mod, point[1], killed)
    try:
        run(setup, saved, epochs=2, resume=True)  # trains epoch 2, killed while saving it
    except SystemExit:
        pass
    monkeypatch.undo()
    with caplog.at_level(logging.WARNING):
        resumed = run(setup, saved, epochs=2, resume=True)
    head = ck.read_checkpoint_header(saved)
    assert (head["epoch"], head["step"]) == (2, 0)
    # either epoch 2 was re-run from the epoch-1 checkpoint, or the save had completed
    if resumed:
        assert resumed[-1]["train_loss"] == pytest.approx(full[-1]["train_loss"], rel=1e-6)
    assert not [p for p in saved.iterdir() if p.name.startswith((".tmp-", ".latest-"))]


def test_resume_falls_back_to_an_older_complete_checkpoint_and_says_so(setup, saved, caplog):
    run(setup, saved, epochs=2, resume=True)
    target = saved / os.readlink(saved / "latest")
    (target / "worker-00001.pt").unlink()  # the newest is incomplete
    with caplog.at_level(logging.WARNING):
        records = run(setup, saved, epochs=2, resume=True)
    assert len(records) == 1  # epoch 2 re-run from the epoch-1 checkpoint
    assert any("incomplete" in r.message and "resuming from the complete checkpoint" in r.message
               for r in caplog.records), [r.message for r in caplog.records]


def test_one_checkpoint_is_one_position_in_every_message(setup, saved, caplog):
    """Adversarial pass on formats, F8: ckpt-00001-00000000 ("epoch": 1, "step": 0: the next step to run, 0-based
    epoch) was "epoch 2 step 0" in the fall-back warning and "epoch 1 step 0" in the edited-header refusal."""
    target = saved / os.readlink(saved / "latest")
    assert json.loads((target / "checkpoint.json").read_text())["epoch"] == 1
    (saved / "latest").unlink()
    (saved / "latest").symlink_to("nope")
    with caplog.at_level(logging.WARNING):
        with pytest.raises(TrainingError) as exc:  # stop at the refusal below, after the warning
            _edit_header_of(target, lambda h: h.update(epoch=5))
            run(setup, saved, epochs=2, resume=True)
    warned = [r.message for r in caplog.records if "resuming from the complete checkpoint" in r.message]
    assert warned and warned[0].endswith(f"{target} (epoch 6 step 0) instead"), warned
    assert f'says epoch 6 step 0 ("epoch": 5, 0-based), but the state in trainer.pt was saved at epoch 2 step 0: ' \
           f"the header was edited" in one_line(exc)


def _edit_header_of(ckpt: Path, fn) -> None:
    path = ckpt / "checkpoint.json"
    head = json.loads(path.read_text())
    fn(head)
    path.write_text(json.dumps(head))


def test_a_latest_without_any_complete_checkpoint_is_one_line(setup, saved):
    target = saved / os.readlink(saved / "latest")
    (target / "trainer.pt").unlink()
    with pytest.raises(TrainingError) as exc:
        run(setup, saved, epochs=2, resume=True)
    assert "no complete older checkpoint" in one_line(exc)


def test_full_disk_during_a_save_is_one_line_and_leaves_no_temporary(setup, tmp_path, monkeypatch):
    def full(*a, **k):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(ck.torch, "save", full)
    with pytest.raises(TrainingError) as exc:
        run(setup, tmp_path / "ck")
    assert "no space left" in one_line(exc) and "`checkpoint_dir`" in str(exc.value)
    assert not (tmp_path / "ck").exists()  # no temporary in it, so the run removed the directory it made


# --------------------------------------------------------------------------- item 3: no code runs
class _Payload:
    def __init__(self, marker: Path):
        self.marker = marker

    def __reduce__(self):
        return (Path.touch, (self.marker,))


def test_an_unwritable_checkpoint_dir_is_refused_before_training(setup, tmp_path, monkeypatch):
    """The first save found it after a whole epoch (hours at scale); now it is tried before the first step."""
    (tmp_path / "afile").write_text("x")
    steps = []
    monkeypatch.setattr("gmp.train.trainer.Trainer.fit", lambda *a, **k: steps.append(1) or [])
    with pytest.raises(TrainingError) as exc:
        run(setup, tmp_path / "afile" / "ck")
    assert "cannot write a checkpoint in" in one_line(exc) and "Not a directory" in str(exc.value)
    assert steps == []
    run(setup, tmp_path / "new" / "ck")  # a directory that can be made is made, and holds no probe after
    assert steps == [1] and [p.name for p in (tmp_path / "new" / "ck").iterdir()] == []


def test_resume_never_runs_code_from_a_checkpoint(setup, saved, tmp_path):
    target = saved / os.readlink(saved / "latest")
    marker = tmp_path / "pwned"
    torch.save({"model": _Payload(marker)}, target / "trainer.pt")
    head = json.loads((target / "checkpoint.json").read_text())
    head["files"]["trainer.pt"] = (target / "trainer.pt").stat().st_size
    (target / "checkpoint.json").write_text(json.dumps(head))
    with pytest.raises(TrainingError) as exc:
        run(setup, saved, epochs=2, resume=True)
    assert "trainer.pt is not a readable gmp checkpoint file" in one_line(exc)
    assert not marker.exists()


def test_the_schema_1_golden_checkpoint_is_refused_before_anything_is_unpickled(tmp_path, monkeypatch):
    shutil.copytree(GOLDEN / "checkpoint_v1", tmp_path / "ck")

    def no_load(*a, **k):
        raise AssertionError("a schema-1 file was unpickled")

    monkeypatch.setattr(ck.torch, "load", no_load)
    with pytest.raises(TrainingError) as exc:
        ck.read_checkpoint_header(tmp_path / "ck")
    msg = one_line(exc)
    assert "schema_version 1" in msg and "unpickle" in msg and "--resume" in msg


def test_safe_encoding_round_trips_numpy_state():
    state = {"rng": np.random.get_state(), "c": np.arange(6, dtype=np.int64).reshape(2, 3), "f": np.float32(2.5),
             "t": torch.ones(2), "nested": [{"u": np.zeros(0, np.uint32)}], "s": "x", "n": None}
    import io

    buf = io.BytesIO()
    torch.save(ck.to_safe(state), buf)
    buf.seek(0)
    back = ck.from_safe(torch.load(buf, weights_only=True))
    assert back["rng"][0] == "MT19937" and np.array_equal(back["rng"][1], state["rng"][1])
    assert back["c"].dtype == np.int64 and np.array_equal(back["c"], state["c"]) and back["f"] == 2.5
    assert back["nested"][0]["u"].dtype == np.uint32 and back["s"] == "x" and back["n"] is None
    with pytest.raises(TypeError):
        ck.to_safe({"x": object()})


# --------------------------------------------------------------------------- item 4: corruption
def _edit_header(ckdir: Path, fn) -> None:
    path = ckdir / os.readlink(ckdir / "latest") / "checkpoint.json"
    head = json.loads(path.read_text())
    fn(head)
    path.write_text(json.dumps(head))


HEADER_EDITS = {
    "no dataset_sha256": (lambda h: h.pop("dataset_sha256"), "dataset_sha256"),
    "no placement_sha256": (lambda h: h.pop("placement_sha256"), "placement_sha256"),
    "no num_workers": (lambda h: h.pop("num_workers"), "num_workers"),
    "no config": (lambda h: h.pop("config"), "config"),
    "no epoch": (lambda h: h.pop("epoch"), "epoch"),
    "epoch str": (lambda h: h.update(epoch="x"), "epoch"),
    "epoch negative": (lambda h: h.update(epoch=-5), "epoch"),
    "config str": (lambda h: h.update(config="wdl"), "config"),
    "num_workers float": (lambda h: h.update(num_workers=2.0), "num_workers"),
    "step beyond the epoch": (lambda h: h.update(step=1000000), "step 1000000 is beyond"),
    "files not a dict": (lambda h: h.update(files=[]), "files"),
    "deeply nested": (lambda h: h.update(config={"a": json.loads("[" * 40 + "]" * 40)}), "nested"),
}


@pytest.mark.parametrize("name", sorted(HEADER_EDITS))
def test_corrupt_checkpoint_header_is_one_line(setup, saved, name):
    fn, pattern = HEADER_EDITS[name]
    _edit_header(saved, fn)
    with pytest.raises(TrainingError) as exc:
        run(setup, saved, epochs=2, resume=True)
    assert pattern in one_line(exc)


def _rewrite(ckdir: Path, name: str, obj=None, raw: bytes | None = None) -> None:
    target = ckdir / os.readlink(ckdir / "latest")
    if raw is not None:
        (target / name).write_bytes(raw)
    else:
        torch.save(obj, target / name)
    _edit_header(ckdir, lambda h: h["files"].update({name: (target / name).stat().st_size}))


def _loaded(ckdir: Path, name: str) -> dict:
    return torch.load(ckdir / "latest" / name, weights_only=True)


@pytest.mark.parametrize("case", ["garbage worker", "trainer without model", "model tensor of the wrong shape",
                                  "counters of the wrong shape", "trainer a list", "truncated trainer"])
def test_corrupt_checkpoint_file_is_one_line(setup, saved, case):
    if case == "garbage worker":
        _rewrite(saved, "worker-00001.pt", raw=b"\x80\x04garbage" * 10)
    elif case == "trainer without model":
        obj = _loaded(saved, "trainer.pt")
        obj.pop("model")
        _rewrite(saved, "trainer.pt", obj)
    elif case == "model tensor of the wrong shape":
        obj = _loaded(saved, "trainer.pt")
        key = next(iter(obj["model"]))
        obj["model"][key] = torch.zeros(17, 3)
        _rewrite(saved, "trainer.pt", obj)
    elif case == "counters of the wrong shape":
        obj = _loaded(saved, "worker-00000.pt")
        obj["counters"] = ck.to_safe(np.zeros(3, np.int64))
        _rewrite(saved, "worker-00000.pt", obj)
    elif case == "trainer a list":
        _rewrite(saved, "trainer.pt", [1, 2])
    else:
        target = saved / os.readlink(saved / "latest")
        data = (target / "trainer.pt").read_bytes()
        _rewrite(saved, "trainer.pt", raw=data[: len(data) // 2])
    with pytest.raises(TrainingError) as exc:
        run(setup, saved, epochs=2, resume=True)
    assert "checkpoint" in one_line(exc) or ".pt" in str(exc.value)


def test_damaged_bytes_inside_a_checkpoint_file_are_named(setup, saved):
    """A tensor's bytes flipped (same size, so the header's size check passes): torch read the damaged
    ids without noticing, and the resume said the checkpoint held "other rows than the manifest"."""
    target = saved / os.readlink(saved / "latest")
    with zipfile.ZipFile(target / "worker-00001.pt") as z:
        info = max(z.infolist(), key=lambda i: i.file_size)  # the largest entry: a tensor's data
    data = bytearray((target / "worker-00001.pt").read_bytes())
    start = info.header_offset + 30 + len(info.filename.encode()) + len(info.extra)  # the entry's data
    for k in range(start, start + min(64, info.file_size)):
        data[k] ^= 0xFF  # other bytes whatever they were
    (target / "worker-00001.pt").write_bytes(bytes(data))
    with pytest.raises(TrainingError) as exc:
        run(setup, saved, epochs=2, resume=True)
    assert "worker-00001.pt is damaged: its entry" in one_line(exc) and "fails its CRC-32 check" in str(exc.value)


@pytest.mark.parametrize("version", [2, 3])
def test_golden_checkpoints_read_without_unpickling(tmp_path, version):
    ckdir = GOLDEN / f"checkpoint_v{version}"
    found = ck.find_checkpoint(ckdir)
    assert found is not None
    path, head = found
    assert head["schema_version"] == version and head["num_workers"] == 2
    main = ck._load(path / "trainer.pt", ck.TRAINER_KEYS)
    assert main["numpy_rng"][0] == "MT19937" and main["numpy_rng"][1].dtype == np.uint32
    for w in range(head["num_workers"]):
        state = ck._load(path / f"worker-{w:05d}.pt", ck.WORKER_KEYS)
        assert isinstance(state["counters"], np.ndarray) and isinstance(state["store"]["table"], torch.Tensor)


# --------------------------------------------------------------------------- what saving and logging may touch
def test_a_checkpoint_dir_with_other_files_is_refused_and_left_alone(setup, tmp_path):
    ckdir = tmp_path / "ck"
    (ckdir / "latest").mkdir(parents=True)  # a real 'latest' that is no checkpoint, and look-alike names
    (ckdir / "latest" / "notes.txt").write_text("x")
    (ckdir / ".tmp-keep").write_text("y")
    (ckdir / "ckpt-00001-00000000").mkdir()
    before = sorted(str(p.relative_to(ckdir)) for p in ckdir.rglob("*"))
    with pytest.raises(TrainingError) as exc:
        run(setup, ckdir)
    assert "which are not gmp checkpoints" in one_line(exc) and ".tmp-keep" in str(exc.value)
    assert sorted(str(p.relative_to(ckdir)) for p in ckdir.rglob("*")) == before


def test_another_runs_checkpoints_are_not_replaced_without_resume(setup, saved):
    kept = os.readlink(saved / "latest")
    with pytest.raises(TrainingError) as exc:
        run(setup, saved, epochs=2)
    assert "holds the checkpoints of an earlier run; continue it with `resume=True`" in one_line(exc)
    assert os.readlink(saved / "latest") == kept and (saved / kept / "checkpoint.json").is_file()
    run(setup, saved, epochs=2, resume=True)  # what the message says works


def test_a_log_that_is_not_a_training_log_is_refused_before_training(setup, saved, tmp_path):
    notes = tmp_path / "notes.txt"
    notes.write_text("my notes\nresults 0.81\n")
    binary = tmp_path / "bin.dat"
    binary.write_bytes(bytes(range(128, 256)) + bytes(range(256)) * 4)  # not UTF-8 from its first line
    dataset_json = Path(setup[0]) / "dataset.json"
    header = dataset_json.read_bytes()
    for log, said in ((notes, "line 1 is not a gmp training record"), (binary, "not UTF-8 text"),
                      (dataset_json, "is inside a gmp dataset")):
        for resume in (False, True):
            with pytest.raises(TrainingError) as exc:
                run(setup, saved if resume else tmp_path / "new", epochs=2, resume=resume, log_json=log)
            assert said in one_line(exc)
    assert notes.read_text() == "my notes\nresults 0.81\n" and dataset_json.read_bytes() == header


def test_resume_continues_its_own_run_in_a_shared_log_and_keeps_a_torn_line_out(setup, tmp_path):
    log = tmp_path / "shared.jsonl"
    run(setup, tmp_path / "a", log_json=log)  # run A: epoch 1, checkpointed
    run(setup, None, epochs=2, log_json=log)  # run B in the same log, no checkpoint
    with open(log, "a", encoding="utf-8") as f:
        f.write('{"epoch": 2, "kind": "st')  # torn by a crash
    a, b = (json.loads(line)["run"] for line in log.read_text().splitlines()[:1] + log.read_text().splitlines()[1:2])
    assert a != b
    run(setup, tmp_path / "a", epochs=2, resume=True, log_json=log)
    recs = [json.loads(line) for line in log.read_text().splitlines()]
    by_run = {r: [(x["epoch"], x.get("kind")) for x in recs if x["run"] == r] for r in (a, b)}
    assert by_run[a] == [(1, "epoch"), (2, "epoch")]  # A's epoch 2 under A's id
    assert by_run[b] == [(1, "epoch"), (2, "epoch")]  # B's lines untouched
    assert {x["run"] for x in recs} == {a, b}


def test_resume_refuses_a_setting_only_the_checkpoint_records(setup, tmp_path):
    ckdir = tmp_path / "ck"
    path, man = setup
    train(path, man, dataclasses.replace(CFG, comm_dtype="bf16"), checkpoint_dir=ckdir)
    with pytest.raises(TrainingError) as exc:  # the default (None) would silently train on at fp32
        train(path, man, dataclasses.replace(CFG, epochs=2), checkpoint_dir=ckdir, resume=True)
    assert "was made with comm_dtype='bf16', this run has comm_dtype=None" in one_line(exc)
    train(path, man, dataclasses.replace(CFG, epochs=2, comm_dtype="bf16"), checkpoint_dir=ckdir, resume=True)


def test_a_refused_nested_setting_names_the_part_that_differs(tmp_path):
    class Config:  # check_settings reads the run's settings through to_json only
        def __init__(self, settings):
            self.settings = settings

        def to_json(self):
            return self.settings

    herald = {"on_demand": False, "cache_rows": 0, "lookahead": 0}
    head = {"config": {"schedule": "herald", "herald": herald}}
    ck.check_settings(tmp_path, head, Config({"schedule": "herald", "herald": dict(herald)}))
    with pytest.raises(TrainingError) as exc:
        ck.check_settings(tmp_path, head, Config({"schedule": "herald", "herald": {**herald, "lookahead": 3}}))
    assert f"{tmp_path} was made with herald.lookahead=0, this run has herald.lookahead=3; " in one_line(exc)
    with pytest.raises(TrainingError) as exc:  # a part only one side has counts, as a whole setting does
        ck.check_settings(tmp_path, head, Config({"schedule": "herald", "herald": {**herald, "extra": 1}}))
    assert "was made with herald.extra=None, this run has herald.extra=1;" in one_line(exc)


def test_a_herald_lru_checkpoint_at_lookahead_0_resumes_with_the_defaults(setup, tmp_path):
    """Adversarial pass on formats, F3: a Herald checkpoint made before --cache-policy defaulted to lookahead
    (config.herald.cache_policy 'lru', lookahead 0) was refused by a resume with the defaults, though with no
    look-ahead window the two policies evict alike; its run now resumes to the uninterrupted lru run's model."""
    from gmp.train.herald import HeraldOptions

    path, man = setup
    lru = dataclasses.replace(CFG, schedule="herald", herald=HeraldOptions(cache_policy="lru", cache_rows=3))
    whole = train(path, man, dataclasses.replace(lru, epochs=2), checkpoint_dir=tmp_path / "whole")
    train(path, man, lru, checkpoint_dir=tmp_path / "ck")
    default = dataclasses.replace(CFG, schedule="herald", herald=HeraldOptions(cache_rows=3), epochs=2)
    assert default.herald.cache_policy == "lookahead"
    resumed = train(path, man, default, checkpoint_dir=tmp_path / "ck", resume=True)
    assert [r["train_loss"] for r in resumed] == [whole[1]["train_loss"]]
    assert resumed[0]["test_auc"] == whole[1]["test_auc"]


def test_a_refused_setting_names_the_value_to_resume_with(setup, tmp_path):
    """F3: the refusal names the setting and (as `name=value`, which the CLI writes as its flag) what to pass."""
    from cli._flags import to_flags
    from gmp.train.herald import HeraldOptions

    path, man = setup
    window = dataclasses.replace(CFG, schedule="herald", herald=HeraldOptions(cache_policy="lru", lookahead=2))
    train(path, man, window, checkpoint_dir=tmp_path / "ck")
    with pytest.raises(TrainingError) as exc:  # at lookahead 2 the policies differ: still refused
        train(path, man, dataclasses.replace(window, herald=HeraldOptions(lookahead=2), epochs=2),
              checkpoint_dir=tmp_path / "ck", resume=True)
    msg = one_line(exc)
    assert "was made with herald.cache_policy='lru', this run has herald.cache_policy='lookahead'; resume with " \
           "the same settings (`cache_policy=lru`) or " in msg
    assert "(--cache-policy lru)" in to_flags(msg)
    with pytest.raises(TrainingError) as exc:
        train(path, man, dataclasses.replace(window, lr=0.5, hidden=(3, 2), epochs=2), checkpoint_dir=tmp_path / "ck",
              resume=True)
    assert "(--hidden 4)" in to_flags(one_line(exc))  # the first that differs, as the CLI takes it


@pytest.mark.parametrize("value", [float("nan"), float("-inf")])
@pytest.mark.parametrize("location", ["device", "host"])
def test_a_non_finite_value_in_a_rows_file_is_refused_on_resume(setup, saved, value, location):
    """Adversarial pass on formats, F9: a NaN in worker-00000.rows (no checksum) resumed and was found at the first
    step as "The training loss is not finite ... lower the learning rate or check the dataset"."""
    from gmp.train.tiers import TierOptions

    ckpt = saved / os.readlink(saved / "latest")
    meta = ck.read_worker_file(ckpt, 1)["primary_rows"]
    rows = ckpt / meta["file"]
    assert meta["num_rows"] > 3 and rows.name == "worker-00001.rows"
    values = np.fromfile(rows, dtype=meta["dtype"]).reshape(meta["num_rows"], meta["width"])
    values[3, 1] = value
    values.tofile(rows)  # same size: the checkpoint stays complete
    tiers = None if location == "device" else TierOptions(table_location=location)  # the rows stream into a tier
    with pytest.raises(TrainingError) as exc:
        train(*setup, dataclasses.replace(CFG, epochs=2, tiers=tiers), checkpoint_dir=saved, resume=True)
    assert one_line(exc) == (f"{rows}: row 3 holds {value!r} (column 1), expected finite values; the checkpoint is "
                             f"damaged (a .rows file carries no checksum): start without `resume=True` or point "
                             f"`checkpoint_dir` elsewhere.")
    with pytest.raises(TrainingError, match=r"row 3 holds"):  # reading rows by id too
        ck.read_primary_rows(saved, np.arange(int(np.load(setup[1] / "embedding_primary.npy").size)))


@pytest.mark.parametrize("bad", [-5.0, float("nan"), 0.0])
def test_a_bad_collective_timeout_is_refused_on_the_local_engine_too(setup, bad):
    with pytest.raises(TrainingError) as exc:
        run(setup, None, collective_timeout=bad)
    assert "collective_timeout" in one_line(exc)
