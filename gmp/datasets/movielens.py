"""Importer for MovieLens-100K: RecBole atomic files or the classic GroupLens layout.

Both layouts give the same fields (RecBole's names): ``user_id``,
``item_id``, the user's ``age``, ``gender``, ``occupation``, ``zip_code``,
the item's ``release_year`` and the multi-valued genre list ``class``.
One sample per rating; label = 1 when ``rating >= --rating-threshold``
(default 4). Samples keep the order of the ratings file (so the tail test
split is the file's last ratings).

RecBole atomic (``INPUT`` = ``ml-100k.inter`` or the directory holding it, which must hold one
``*.inter`` file; ``ml-100k.user`` / ``ml-100k.item`` are read from beside it when present, and for
RecBole's split files ``ml-100k.train.inter`` those of the shorter name ``ml-100k``; a warning says
when no side file is found)::

    ml-100k.inter   user_id:token  item_id:token  rating:float  timestamp:float
                    196            242            3             881250949
    ml-100k.user    user_id:token  age:token  gender:token  occupation:token  zip_code:token
                    1              24         M             technician        85711
    ml-100k.item    item_id:token  movie_title:token_seq  release_year:token  class:token_seq
                    1              Toy Story              1995                Animation Children's Comedy

Tab-separated with a typed header ``name:type``. ``token`` columns become
categorical fields, ``token_seq`` columns multi-valued fields (values
separated by spaces), ``float`` columns of the ``.inter`` file other than
the rating, and of the side files, are not features. ``--ignore`` drops
columns (default: ``movie_title`` — a per-item free text that duplicates
``item_id``; and ``timestamp``).

Classic (``INPUT`` = ``u.data`` or the ``ml-100k/`` directory)::

    u.data   user \\t item \\t rating \\t timestamp          196	242	3	881250949
    u.user   user|age|gender|occupation|zip                 1|24|M|technician|85711
    u.item   id|title|release date|video date|url|19 genre flags (0/1), latin-1
             1|Toy Story (1995)|01-Jan-1995||http://...|0|0|0|1|1|1|0|...

Genre names come from ``u.genre`` when present, else the standard 19.

Malformed lines: a ratings line with the wrong column count or a
non-numeric rating; a side-file line with the wrong column count. A rating
whose user or item is absent from the side files is *not* malformed: its
side fields take their missing ids.
"""

from __future__ import annotations

import logging
import math
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from ..errors import ImportDataError
from ..progress import task
from .csvfmt import interleave
from .format import DatasetWriter
from .streaming import BadLines, CommonOptions, finish_import, hash_strings, iter_chunks, read_header, total_size
from .vocab import Vocabulary

log = logging.getLogger(__name__)

CLASSIC_GENRES = ["unknown", "Action", "Adventure", "Animation", "Children's", "Comedy", "Crime", "Documentary",
                  "Drama", "Fantasy", "Film-Noir", "Horror", "Musical", "Mystery", "Romance", "Sci-Fi", "Thriller",
                  "War", "Western"]
DEFAULT_IGNORE = ("movie_title", "timestamp")


@dataclass
class _Side:
    """A side table (users or items): key -> categorical keys and multi-valued lists."""

    cat_names: list[str]
    multi_names: list[str]
    index: dict[bytes, int] = field(default_factory=dict)
    cat_rows: list[list[bytes | None]] = field(default_factory=list)
    multi_rows: list[list[list[bytes]]] = field(default_factory=list)

    def add(self, key: bytes, cats: list[bytes | None], multis: list[list[bytes]]) -> None:
        self.index[key] = len(self.cat_rows)
        self.cat_rows.append(cats)
        self.multi_rows.append(multis)

    def freeze(self) -> None:
        """Key arrays with one extra all-missing row at the end (unknown key)."""
        n = len(self.cat_rows)
        k = len(self.cat_names)
        flat = [v if v is not None else b"" for row in self.cat_rows for v in row]
        keys = hash_strings(flat)
        self.cat_keys = np.zeros((n + 1, k), np.uint64)
        self.cat_keys[:n] = keys.reshape(n, k)
        self.cat_present = np.zeros((n + 1, k), bool)
        self.cat_present[:n] = np.array([[v is not None and v != b"" for v in row] for row in self.cat_rows],
                                        dtype=bool).reshape(n, k)
        self.multi = []
        for j in range(len(self.multi_names)):
            lists = [row[j] for row in self.multi_rows] + [[]]
            lens = np.array([len(x) for x in lists], np.int64)
            indptr = np.concatenate([[0], np.cumsum(lens)])
            flatm = [v for x in lists for v in x]
            self.multi.append((indptr, hash_strings(flatm)))

    def rows_of(self, keys: list[bytes]) -> np.ndarray:
        missing = len(self.cat_rows)
        return np.array([self.index.get(k, missing) for k in keys], dtype=np.int64)


def _empty_side() -> _Side:
    s = _Side([], [])
    s.freeze()
    return s


def _typed_header(path: Path) -> list[tuple[str, str]]:
    header = read_header(path)
    if not header.strip():
        raise ImportDataError(f"{path}: the input is empty (no header line); expected a RecBole atomic file.")
    cols = []
    for c in header.decode("utf-8", errors="replace").split("\t"):
        name, _, typ = c.strip().partition(":")
        if typ not in ("token", "token_seq", "float", "float_seq"):
            raise ImportDataError(f"{path}: header column {c!r} is not 'name:type' with type token, token_seq, float "
                                  f"or float_seq; is this a RecBole atomic file?")
        cols.append((name, typ))
    return cols


def _resolve_layout(inputs: Sequence[str | os.PathLike]) -> tuple[str, Path, Path | None, Path | None]:
    """(layout, ratings file, users file, items file)."""
    if len(inputs) != 1:
        raise ImportDataError(f"movielens takes one INPUT (the ratings file or its directory), got {len(inputs)}.")
    p = Path(inputs[0])
    if not p.exists() and p.is_symlink():  # exists() is False for a symlink to nowhere and for a loop
        raise ImportDataError(f"{p} is a symbolic link that points nowhere or loops (to {os.readlink(p)}); point it "
                              f"at the ratings file or its directory.")
    if not p.exists():
        raise ImportDataError(f"{p}: no such file or directory; check the INPUT path.")
    if p.is_dir():
        inter = sorted(p.glob("*.inter"))
        if len(inter) > 1:  # taking the first by name imported RecBole's test split alone, without a word
            pick = next((q for q in inter if ".train." in q.name), inter[0])  # RecBole's split: its train file
            raise ImportDataError(f"{p} holds {len(inter)} RecBole '*.inter' files ({', '.join(q.name for q in inter)}); "
                                  f"pass the one to import as INPUT, e.g. gmp data import movielens {pick} --out OUT.")
        if inter:
            p = inter[0]
        elif (p / "u.data").is_file():
            p = p / "u.data"
        else:
            raise ImportDataError(f"{p} holds neither a RecBole '*.inter' file nor a classic 'u.data'; "
                                  f"fetch the data with 'gmp data fetch movielens-100k'.")
    if not os.access(p, os.R_OK):
        raise ImportDataError(f"{p}: permission denied; make the file readable.")
    if not p.is_file():
        raise ImportDataError(f"{p} is not a regular file (a pipe or device); the movielens importer reads the "
                              f"header before the data: save the input to a file first.")
    _refuse_side_file(p)
    if p.suffix == ".inter" or p.name.endswith(".inter.gz"):
        users = items = None
        # <stem>.user/.item, else those of a shorter stem: RecBole's benchmark split files
        # {dataset}.{train,valid,test}.inter share {dataset}.user/.item
        for stem in side_stems(p):
            users, items = _side_file(p.with_name(stem + ".user")), _side_file(p.with_name(stem + ".item"))
            if users is not None or items is not None:
                break
        return "atomic", p, users, items
    u, i = p.with_name("u.user"), p.with_name("u.item")
    return "classic", p, _side_file(u), _side_file(i)


def side_stems(ratings: Path) -> list[str]:
    """The names whose ``.user``/``.item`` files are joined to an ``.inter`` file, first found first:
    ``ml-100k.train.inter`` -> ``ml-100k.train``, ``ml-100k``."""
    stem = ratings.name[: ratings.name.index(".inter")]
    out = []
    while stem:
        out.append(stem)
        stem = stem.rpartition(".")[0]
    return out


#: MovieLens side files, by how their names end, and what they hold
_SIDE_FILES = {".user": "users", ".item": "items", "u.user": "users", "u.item": "items", "u.genre": "genres",
               "u.occupation": "occupations", "u.info": "counts"}


def _refuse_side_file(p: Path) -> None:
    """A side file given as INPUT is refused naming the ratings file to give (its lines were all malformed)."""
    name = p.name[:-3] if p.name.endswith(".gz") else p.name
    what = _SIDE_FILES.get(name) or next((w for end, w in _SIDE_FILES.items() if end.startswith(".")
                                          and name.endswith(end)), None)
    if what is None:
        return
    classic = name.startswith("u.") and name in _SIDE_FILES
    ratings = p.with_name("u.data") if classic else p.with_name(name.rpartition(".")[0] + ".inter")
    raise ImportDataError(f"{p} is a MovieLens side file ({what}), not the ratings; pass the ratings file "
                          f"({ratings}) or its directory, and the side files beside it are joined in.")


def _side_file(path: Path) -> Path | None:
    """``path`` when it is a readable regular file, None when nothing is there. Anything else there (a
    directory, a FIFO, a broken or looping symlink, an unreadable file) is refused: skipping it dropped
    every user or item field without a word."""
    if not os.path.lexists(path):
        return None
    try:
        regular = path.is_file()
    except OSError:  # a symlink loop
        regular = False
    if not regular:
        what = ("a broken or looping symlink" if path.is_symlink() and not _exists(path)
                else "a directory" if path.is_dir() else "not a regular file (a pipe or device)")
        raise ImportDataError(f"{path} is {what}; the movielens importer reads the side file beside the ratings "
                              f"when one is there: make it a regular file or remove it.")
    if not os.access(path, os.R_OK):
        raise ImportDataError(f"{path}: permission denied; make the side file readable or remove it.")
    return path


def _exists(path: Path) -> bool:
    try:
        return path.exists()
    except OSError:
        return False


def _side_rows(path: Path, sep: bytes, num_cols: int, bad: BadLines, *, skip_lines: int = 0):
    """The columns of every line of a side file split at ``sep``; a line without ``num_cols`` columns is
    counted in ``bad`` (a malformed line) and skipped."""
    what = "tab-separated" if sep == b"\t" else f"'{sep.decode()}'-separated"
    for chunk in iter_chunks(path, skip_lines=skip_lines):
        bad.skip_blank(chunk)
        lines = chunk.data.split(b"\n")
        if chunk.data.endswith(b"\n"):
            lines.pop()
        for k, line in enumerate(lines):
            parts = line.rstrip(b"\r").split(sep)
            if len(parts) != num_cols:
                bad.add(chunk.file, chunk.line_of(k), f"expected {num_cols} {what} columns, got {len(parts)}")
                continue
            yield parts


def _read_atomic_side(path: Path, key: str, ignore: set[str], bad: BadLines) -> _Side:
    cols = _typed_header(path)
    names = [c for c, _ in cols]
    if key not in names:
        raise ImportDataError(f"{path}: the header has no {key!r} column; got {names}.")
    kj = names.index(key)
    cat = [j for j, (c, t) in enumerate(cols) if t == "token" and j != kj and c not in ignore]
    multi = [j for j, (c, t) in enumerate(cols) if t == "token_seq" and c not in ignore]
    side = _Side([names[j] for j in cat], [names[j] for j in multi])
    for parts in _side_rows(path, b"\t", len(cols), bad, skip_lines=1):
        side.add(parts[kj], [parts[j] for j in cat], [parts[j].split() for j in multi])
    side.freeze()
    return side


def _read_classic_users(path: Path, bad: BadLines) -> _Side:
    side = _Side(["age", "gender", "occupation", "zip_code"], [])
    for parts in _side_rows(path, b"|", 5, bad):
        side.add(parts[0], parts[1:5], [])
    side.freeze()
    return side


def _read_classic_items(path: Path, bad: BadLines) -> _Side:
    genres = CLASSIC_GENRES
    gfile = path.with_name("u.genre")
    if gfile.is_file():
        names = [ln.split("|")[0] for ln in gfile.read_text(encoding="latin-1").splitlines() if ln.strip()]
        if names:
            genres = names
    side = _Side(["release_year"], ["class"])
    want = 5 + len(genres)
    for parts in _side_rows(path, b"|", want, bad):
        date = parts[2].strip()
        year = date[-4:] if len(date) >= 4 and date[-4:].isdigit() else None
        g = [genres[j].encode() for j, flag in enumerate(parts[5:]) if flag.strip() == b"1"]
        side.add(parts[0], [year], [g])
    side.freeze()
    return side


def import_movielens(inputs: Sequence[str | os.PathLike], out: str | os.PathLike, *,
                     rating_threshold: float = 4.0, ignore: Sequence[str] | None = None,
                     common: CommonOptions | None = None) -> dict[str, Any]:
    """Import MovieLens ratings (+ user and item side files) into a prepared dataset."""
    common = common or CommonOptions()
    if not math.isfinite(rating_threshold):
        raise ImportDataError(f"`rating_threshold` must be a finite number, got {rating_threshold}.")
    layout, ratings, users_path, items_path = _resolve_layout(inputs)
    if users_path is None and items_path is None:  # the user and item fields are then missing: say so
        looked = ("u.user, u.item" if layout == "classic" else
                  ", ".join(f"{stem}{end}" for stem in side_stems(ratings) for end in (".user", ".item")))
        log.warning("warning: no side files beside %s (looked for %s); only the ratings file's columns are "
                    "imported, without user or item features.", ratings, looked)
    ignore_set = set(DEFAULT_IGNORE if ignore is None else ignore)
    bad = BadLines(common.max_bad_lines)
    if layout == "atomic":
        cols = _typed_header(ratings)
        names = [c for c, _ in cols]
        for need in ("user_id", "item_id", "rating"):
            if need not in names:
                raise ImportDataError(f"{ratings}: the header has no {need!r} column; got {names}.")
        known = set(names) | {c for side in (users_path, items_path) if side for c, _ in _typed_header(side)}
        unknown = sorted(set(ignore or ()) - known)  # a typo would keep the column it meant, silently
        if unknown:
            raise ImportDataError(f"`ignore` names {', '.join(map(repr, unknown))}, which no file has; the columns "
                                  f"are {', '.join(sorted(known))}.")
    elif ignore is not None:
        raise ImportDataError("`ignore` applies to the atomic layout (typed headers); the classic files' features "
                              "are fixed: drop `ignore`.")
    if layout == "atomic":
        uj, ij, rj = names.index("user_id"), names.index("item_id"), names.index("rating")
        # the rating is the label: never a feature, whatever type its header gives it (a 'rating:token'
        # column made it one, so the model saw its own label)
        inter_cat = [j for j, (c, t) in enumerate(cols) if t == "token" and c not in ignore_set and j != rj]
        inter_multi = [j for j, (c, t) in enumerate(cols) if t == "token_seq" and c not in ignore_set and j != rj]
        sep, skip, ncols = b"\t", 1, len(cols)
        users = _read_atomic_side(users_path, "user_id", ignore_set, bad) if users_path else _empty_side()
        items = _read_atomic_side(items_path, "item_id", ignore_set, bad) if items_path else _empty_side()
    else:
        names = ["user_id", "item_id", "rating", "timestamp"]
        inter_cat, inter_multi = [0, 1], []
        sep, skip, ncols = b"\t", 0, 4
        uj, ij, rj = 0, 1, 2
        users = _read_classic_users(users_path, bad) if users_path else _empty_side()
        items = _read_classic_items(items_path, bad) if items_path else _empty_side()
    vocab = Vocabulary(min_count=common.min_count, hash_sizes=common.hash_sizes)
    f_inter = [vocab.add_field(names[j]) for j in inter_cat]
    f_user = [vocab.add_field(n) for n in users.cat_names]
    f_item = [vocab.add_field(n) for n in items.cat_names]
    f_imulti = [vocab.add_field(names[j], "multi") for j in inter_multi]
    f_umulti = [vocab.add_field(n, "multi") for n in users.multi_names]
    f_itmulti = [vocab.add_field(n, "multi") for n in items.multi_names]
    vocab.check_hash_fields()
    if not (f_inter or f_user or f_item or f_imulti or f_umulti or f_itmulti):
        raise ImportDataError(f"`ignore` {','.join(sorted(ignore_set))} leaves no feature column (the rating is the "
                              f"label); keep at least one, e.g. user_id or item_id.")
    lines_read = 0
    top = -math.inf  # the highest rating read
    paths = [ratings]
    sources = [p for p in (ratings, users_path, items_path) if p]
    with DatasetWriter(out, num_dense=0, overwrite=common.overwrite, inputs=sources) as writer, \
            task("Importing movielens", total=total_size(paths), unit="B") as advance:
        last = 0
        for chunk in iter_chunks(ratings, chunk_bytes=common.chunk_bytes, skip_lines=skip):
            bad.skip_blank(chunk)
            lines = chunk.data.split(b"\n")
            if chunk.data.endswith(b"\n"):
                lines.pop()
            lines_read += len(lines)
            rows, labels = [], []
            for k, line in enumerate(lines):
                parts = line.rstrip(b"\r").split(sep)
                if len(parts) != ncols:
                    bad.add(chunk.file, chunk.line_of(k), f"expected {ncols} tab-separated columns, got {len(parts)}")
                    continue
                try:
                    rating = float(parts[rj])
                except ValueError:
                    rating = None
                if rating is None or not math.isfinite(rating):  # nan/inf would make every label 0 or 1
                    what = "a number" if rating is None else "a finite number"
                    bad.add(chunk.file, chunk.line_of(k),
                            f"rating (column {rj + 1}) is not {what}: {parts[rj].decode('utf-8', 'replace')[:24]!r}")
                    continue
                rows.append(parts)
                labels.append(1.0 if rating >= rating_threshold else 0.0)
                top = max(top, rating)
            bad.check(name=str(ratings), lines_read=lines_read)
            advance(chunk.progress - last)
            last = chunk.progress
            if not rows:
                continue
            m = len(rows)
            parts_out: list[tuple[np.ndarray | None, np.ndarray]] = []
            for f, j in zip(f_inter, inter_cat):
                toks = [r[j] for r in rows]
                parts_out.append((None, vocab.lookup(f, hash_strings(toks), np.array([t != b"" for t in toks]))))
            urow = users.rows_of([r[uj] for r in rows])
            irow = items.rows_of([r[ij] for r in rows])
            for side, row, fids in ((users, urow, f_user), (items, irow, f_item)):
                for j, f in enumerate(fids):
                    parts_out.append((None, vocab.lookup(f, side.cat_keys[row, j], side.cat_present[row, j])))
            for f, j in zip(f_imulti, inter_multi):
                lists = [r[j].split() for r in rows]
                parts_out.append(vocab.lookup_multi(f, [len(x) for x in lists],
                                                    hash_strings([v for x in lists for v in x])))
            for side, row, fids in ((users, urow, f_umulti), (items, irow, f_itmulti)):
                for j, f in enumerate(fids):
                    indptr, keys = side.multi[j]
                    lens = indptr[row + 1] - indptr[row]
                    take = np.repeat(indptr[row], lens) + (np.arange(int(lens.sum())) -
                                                            np.repeat(np.cumsum(lens) - lens, lens))
                    parts_out.append(vocab.lookup_multi(f, lens, keys[take]))
            lengths, ids = interleave(parts_out, m)
            writer.add(lengths, ids, np.asarray(labels, np.float32))
        if top != -math.inf and top < rating_threshold:
            log.warning("warning: --rating-threshold %g is above every rating (the highest is %g), so every label "
                        "is 0; choose a threshold within the ratings (the default 4 reads 4 and 5 stars as liked).",
                        rating_threshold, top)
        options = {"layout": layout, "rating_threshold": rating_threshold, "ignore": sorted(ignore_set),
                   "users": str(users_path) if users_path else None, "items": str(items_path) if items_path else None}
        return finish_import(writer, vocab, bad, fmt="movielens", paths=paths, lines_read=lines_read,
                             common=common, format_options=options)
