"""Fetch small public data sets at run time (never committed to the repository).

``movielens-100k``: the GroupLens terms forbid redistributing MovieLens, so
gmp does not ship it. The RecBole project publishes ml-100k in its atomic
format inside the ``recbole`` 1.2.1 wheel on PyPI; :func:`fetch_movielens_100k`
runs ``pip download --no-deps recbole==1.2.1`` into a temporary directory
and extracts ``recbole/dataset_example/ml-100k/ml-100k.{inter,user,item}``
from the wheel (a zip) into ``out``::

    gmp data fetch movielens-100k --out data/ml-100k-raw
    gmp data import movielens data/ml-100k-raw --out data/ml-100k

Without network access (or pip) it fails with one clear message.
"""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

from .._io import KIND_NAMES, check_output_file, enclosing_output, not_a_directory, release_claim, write_claimed_file
from ..errors import ImportDataError, OutputError

log = logging.getLogger(__name__)

RECBOLE_VERSION = "1.2.1"
ML100K_MEMBERS = ("ml-100k.inter", "ml-100k.user", "ml-100k.item")
DATASETS = {"movielens-100k": "MovieLens-100K ratings + users + items (RecBole atomic files, from the recbole wheel)"}


def fetch(name: str, out: str | os.PathLike, *, overwrite: bool = False, wheel: str | os.PathLike | None = None
          ) -> list[Path]:
    """Fetch data set ``name`` into directory ``out``; returns the files written."""
    if name != "movielens-100k":
        raise ImportDataError(f"unknown data set {name!r}; gmp can fetch: {', '.join(DATASETS)}.")
    return fetch_movielens_100k(out, overwrite=overwrite, wheel=wheel)


def fetch_movielens_100k(out: str | os.PathLike, *, overwrite: bool = False,
                         wheel: str | os.PathLike | None = None) -> list[Path]:
    """Extract ml-100k's atomic files from the recbole wheel into ``out``.

    ``wheel`` skips the download (a recbole wheel already on disk). ``out`` may hold other files, but
    not lie inside a gmp dataset, manifest, export or checkpoint directory (their directories hold only
    their own files); that is refused before anything is downloaded.
    """
    out = Path(out)
    targets = [out / m for m in ML100K_MEMBERS]
    check_fetch_output(out, targets, overwrite=overwrite)
    try:
        with tempfile.TemporaryDirectory(prefix="gmp-fetch-") as tmp:
            whl = Path(wheel) if wheel else _download_recbole(Path(tmp))
            try:
                with zipfile.ZipFile(whl) as z:
                    data = []
                    for member in ML100K_MEMBERS:
                        src = f"recbole/dataset_example/ml-100k/{member}"
                        try:
                            data.append(z.read(src))
                        except KeyError:
                            raise ImportDataError(f"{whl} has no {src}; expected recbole {RECBOLE_VERSION}.") \
                                from None
            except zipfile.BadZipFile:
                raise ImportDataError(f"{whl} is not a valid wheel (zip); delete it and fetch again.") from None
        for target, blob in zip(targets, data):  # each through a temporary, only where its claim still holds
            write_claimed_file(target, blob)
    except BaseException:
        for target in reversed(targets):  # the first claim made `out`: released last, it removes it
            release_claim(target)
        raise
    log.info("fetched ml-100k into %s", out)
    return targets


def check_fetch_output(out: Path, targets: list[Path], *, overwrite: bool) -> None:
    """Refuse (one line) raw files that must not be written, and claim them: ``out`` inside a gmp output
    whose directory holds only its own files, ml-100k files already there without ``overwrite``, or what
    :func:`gmp._io.check_output_file` refuses (a link, a directory, a file another run is writing)."""
    for place in (out, *Path(os.path.abspath(out)).parents):  # as the import says it, before any claim
        if place.exists():
            if not place.is_dir():
                raise not_a_directory(out, place, "`out`")
            break
    inside = enclosing_output(targets[0])
    if inside is not None:
        kind, where = KIND_NAMES[inside[0]], inside[1]
        is_ = f"is {kind}" if where == Path(os.path.abspath(out)) else f"is inside {kind} ({where})"
        raise OutputError(f"`out` {out} {is_}, whose directory holds only its own files (rewriting it would refuse "
                          f"or lose anything else); fetch the raw files into a directory outside it.")
    if any(t.exists() or t.is_symlink() for t in targets) and not overwrite:
        raise ImportDataError(f"{out} already holds ml-100k files; pass `overwrite=True` or choose another `out`.")
    try:
        for t in targets:
            check_output_file(t, overwrite=overwrite)
    except BaseException:
        for t in reversed(targets):
            release_claim(t)
        raise


def _download_recbole(tmp: Path) -> Path:
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--disable-pip-version-check",
           f"recbole=={RECBOLE_VERSION}", "-d", str(tmp)]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    except FileNotFoundError:
        raise ImportDataError("cannot run pip to download recbole; install pip in this environment.") from None
    except subprocess.TimeoutExpired:
        raise ImportDataError("downloading the recbole wheel from PyPI timed out; check the network and retry.") \
            from None
    wheels = sorted(tmp.glob("recbole-*.whl"))
    if proc.returncode != 0 or not wheels:
        last = (proc.stderr or proc.stdout or "").strip().splitlines()[-1:] or ["no output"]
        raise ImportDataError(
            f"could not download recbole=={RECBOLE_VERSION} from PyPI (are you offline?): {last[0]}; "
            f"retry with network access, or pass a downloaded wheel with `wheel`."
        )
    return wheels[0]
