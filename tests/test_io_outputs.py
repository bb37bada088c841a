"""Where an output cannot go, and an input named '-': one line that says why and what to do.

An --out in /sys or /proc said "could not take the lock /sys/.gmpx.gmp-lock (it keeps changing); try
again" or "check the permissions of /proc", naming gmp's internal lock file; fetch into a regular file
said "cannot create ...: File exists"; '-' as an input was "no such file"."""

from __future__ import annotations

import errno
import os
import subprocess
from pathlib import Path

import pytest

from cli_helpers import invoke

FIX = Path(__file__).parent / "data" / "import"


@pytest.mark.parametrize("create_error, why", [
    (PermissionError(errno.EACCES, "Permission denied"), "permission denied"),  # /sys, as root too
    (FileNotFoundError(errno.ENOENT, "No such file or directory"), "no such file or directory"),  # /proc
], ids=["sys", "proc"])
def test_out_where_no_file_can_be_created_is_not_writable(tmp_path, monkeypatch, create_error, why):
    """The folder refuses every new file (the lock's O_CREAT fails, and no lock is there to read): the
    location is not writable, said without the lock file's name and without 'try again'."""
    real_open = os.open

    def no_new_file(path, flags, *args):
        if str(path).endswith(".gmp-lock"):
            if flags & os.O_CREAT:
                raise type(create_error)(*create_error.args)
            raise FileNotFoundError(errno.ENOENT, "No such file or directory")
        return real_open(path, flags, *args)

    monkeypatch.setattr(os, "open", no_new_file)
    out = tmp_path / "gmpx"
    res = invoke("data", "import", "criteo", FIX / "criteo_small.tsv", "--out", out)
    assert res.exit_code == 2, res.output
    assert res.stderr.strip() == (f"error: --out {out}: {tmp_path} is not writable (a file cannot be created there: "
                                  f"{why}); choose another --out.")
    assert sorted(os.listdir(tmp_path)) == []


@pytest.mark.parametrize("where", ["/proc", "/sys"])
def test_out_in_a_kernel_file_system_is_not_writable(tmp_path, where):
    """The real thing, as this user: root passes the access check and fails at the lock."""
    if not Path(where).is_dir():
        pytest.skip(f"no {where} here")
    out = Path(where) / "gmp-test-out"
    res = invoke("data", "import", "criteo", FIX / "criteo_small.tsv", "--out", out)
    assert res.exit_code == 2, res.output
    err = res.stderr.strip()
    assert err.startswith(f"error: --out {out}: ") and err.endswith("; choose another --out."), err
    assert ("is not writable" in err or "cannot write in" in err) and "lock" not in err and "again" not in err, err
    assert not out.exists()


def test_fetch_into_a_regular_file_says_it_is_not_a_directory(tmp_path, monkeypatch):
    def no_download(cmd, **kw):
        raise AssertionError(f"downloaded: {cmd}")

    monkeypatch.setattr(subprocess, "run", no_download)
    afile = tmp_path / "afile"
    afile.write_text("kept\n")
    res = invoke("data", "fetch", "movielens-100k", "--out", afile)
    assert res.exit_code == 2, res.output
    assert res.stderr.strip() == f"error: --out {afile} exists and is not a directory; choose another --out."
    res = invoke("data", "fetch", "movielens-100k", "--out", afile / "raw")
    assert res.exit_code == 2, res.output
    assert res.stderr.strip() == f"error: --out {afile / 'raw'}: {afile} is not a directory; choose another --out."
    assert afile.read_text() == "kept\n" and sorted(os.listdir(tmp_path)) == ["afile"]


@pytest.mark.parametrize("args, fix", [
    (["criteo"], "read standard input as /dev/stdin, with FORMAT one of criteo, libsvm, libfm, libffm (the importers "
                 "that read a pipe)."),
    ([], "read standard input as /dev/stdin, with FORMAT one of criteo, libsvm, libfm, libffm (the importers that "
         "read a pipe)."),
], ids=["criteo", "recognised"])
def test_dash_as_input_says_to_read_dev_stdin(tmp_path, args, fix):
    res = invoke("data", "import", *args, "-", "--out", tmp_path / "x")
    assert res.exit_code == 2, res.output
    assert res.stderr.strip() == f"error: -: no such file (gmp takes no '-' for standard input); {fix}"
    assert sorted(os.listdir(tmp_path)) == []


def test_dash_fix_per_format():
    """Each importer is told what serves it: /dev/stdin for those that stream, a file for the others."""
    from gmp.datasets.streaming import check_inputs
    from gmp.errors import ImportDataError

    for fmt, streams, fix in (("libffm", True, "read standard input as /dev/stdin."),
                              ("csv", False, "the csv importer reads the header before the data, so it cannot read "
                                             "a pipe: save the input to a file.")):
        with pytest.raises(ImportDataError) as err:
            check_inputs(["-"], streams=streams, fmt=fmt)
        assert str(err.value) == f"-: no such file (gmp takes no '-' for standard input); {fix}"


def test_a_lock_holders_long_command_is_cut_at_a_word():
    from gmp._io import shorten_command

    assert shorten_command("gmp partition d --out m") == "gmp partition d --out m"
    long = "gmp partition data/criteo-day-17 --workers 16 --method hybrid --out runs/criteo-day-17.w16"
    assert shorten_command(long, width=60) == "gmp partition data/criteo-day-17 --workers 16 --method ..."
    assert shorten_command("x" * 200, width=10) == "xxxxxx ..."  # no space to cut at: cut at the width
