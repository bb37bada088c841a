"""Streaming machinery shared by every raw-data importer (the per-format readers are criteo.py, csvfmt.py, ...).

Design
------
An importer never holds the whole input text. :func:`iter_chunks` reads each
input file (plain or gzip, detected by its magic bytes, not its name) in
blocks of ``chunk_bytes`` bytes, cuts every block at its last newline and
carries the partial line over to the next block, so each :class:`Chunk` holds
complete lines and knows the 1-based line number of its first line.

Delimited formats (Criteo, Avazu, CSV, MovieLens) are split by a compiled
(numba) tokenizer, :func:`tokenize`, that returns the byte offsets of every
column of every line in the chunk; columns are then converted a whole block
at a time by compiled parsers (:func:`parse_int_block`, :func:`parse_hex_block`,
:func:`parse_float_block`, :func:`hash_token_block`). Each parser returns a
status per cell (0 ok, 1 empty, 2 malformed), so a malformed line is found
without a Python loop over lines; only the (rare) bad lines are turned into
messages.

Blank lines
-----------
A blank line (empty, or only spaces, tabs and carriage returns: :data:`BLANK`) is no sample
and no malformed line: :func:`iter_chunks` leaves it out of its chunks (line
numbers still count it) and :class:`BadLines` counts it; ``dataset.json``'s
``source`` records ``num_blank_lines`` when there were any. Blank lines at the
very end of an input (an editor's) are dropped without being counted.

Bad lines
---------
:class:`BadLines` counts malformed lines and keeps the first 10 as
``{"file", "line", "reason"}``. The limit is ``--max-bad-lines`` (default 0:
strict). The check runs after each chunk, so when the limit is exceeded the
import stops at the end of that chunk and the message lists the malformed
lines found so far (the first 10), e.g.::

    criteo.tsv: 2 malformed lines in the first 5 lines read, more than
    --max-bad-lines 0: criteo.tsv line 2: expected 40 tab-separated columns,
    got 12; criteo.tsv line 5: column 15 (C1) is not hexadecimal: 'zz12';
    fix the input or pass --max-bad-lines N to skip up to N malformed lines.

Errors on the input itself (missing or unreadable path, a directory, a
truncated or corrupt gzip stream, empty input) raise
:class:`~gmp.errors.ImportDataError` with a one-line message.

Bounded memory
--------------
A line longer than :data:`MAX_LINE_BYTES` (16 MiB) is a malformed line that
stops the import with its line number and byte offset (of the decompressed
text, for gzip), whatever ``--max-bad-lines`` says: no supported format has
such lines, so the input is binary or not in this format (``/dev/zero`` has
no newline at all and never ends, so such a line cannot even be skipped).
While a line is being completed its blocks are kept in a list and joined
once, so no buffer is re-copied per block; a read holds at most a block plus
the longest line.
"""

from __future__ import annotations

import dataclasses
import gzip
import logging
import os
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO, Iterator, Mapping, Sequence

import numba
import numpy as np

from .._io import check_memory
from ..errors import ImportDataError
from ..kernels.hashing import mix64
from ..wording import plural

log = logging.getLogger(__name__)

#: bytes read per block (the tokenizer's offset arrays scale with it).
DEFAULT_CHUNK_BYTES = 16 << 20
#: largest block (a read of more than 2 GiB fails on some platforms; bigger blocks gain nothing)
MAX_CHUNK_BYTES = 1 << 30
#: longest line an importer reads (bytes, newline excluded); a longer one is a malformed line that stops
#: the import (module docstring, "Bounded memory")
MAX_LINE_BYTES = 16 << 20
#: how many bad lines are kept verbatim (the rest are only counted).
KEEP_BAD_LINES = 10

OK, EMPTY, BAD = 0, 1, 2


# --------------------------------------------------------------------------
# bad-line accounting
# --------------------------------------------------------------------------
SHOW_BAD_LINES = 5  # examples in an error message (dataset.json keeps KEEP_BAD_LINES)


class MalformedInputError(ImportDataError):
    """Too many malformed lines; carries the counts, so the import's caller can look at
    the file and say what it is (:func:`gmp.datasets.sniff.advice`)."""

    def __init__(self, message: str, *, bad: "BadLines", lines_read: int):
        super().__init__(message)
        self.count = bad.count
        self.lines_read = int(lines_read)
        self.first = list(bad.first)


@dataclass
class BadLines:
    """Counts malformed lines; keeps the first :data:`KEEP_BAD_LINES`. Counts the blank lines
    skipped too (``num_blank``; they are not malformed, so ``max_bad_lines`` does not count them)."""

    max_bad_lines: int = 0
    count: int = 0
    first: list[dict[str, Any]] = field(default_factory=list)
    num_blank: int = 0

    def __post_init__(self) -> None:
        if self.max_bad_lines < 0:
            raise ImportDataError(f"`max_bad_lines` must be >= 0, got {self.max_bad_lines}.")

    def add(self, file: str, line: int, reason: str) -> None:
        self.count += 1
        if len(self.first) < KEEP_BAD_LINES:
            self.first.append({"file": file, "line": int(line), "reason": reason})

    def add_many(self, file: str, lines: np.ndarray, reason_of) -> None:
        """Count ``lines`` (line numbers) as bad; ``reason_of(k)`` gives the k-th's reason
        (called only for the ones kept)."""
        for k in range(min(len(lines), KEEP_BAD_LINES - len(self.first))):
            self.first.append({"file": file, "line": int(lines[k]), "reason": reason_of(k)})
        self.count += int(len(lines))

    def skip_blank(self, chunk: "Chunk") -> None:
        """Count the blank lines :func:`iter_chunks` left out of ``chunk``."""
        self.num_blank += chunk.num_blank

    def check(self, *, name: str, lines_read: int) -> None:
        """Raise :class:`MalformedInputError` if more than ``max_bad_lines`` were seen."""
        if self.count <= self.max_bad_lines:
            return
        shown = "; ".join(f"{b['file']} line {b['line']}: {b['reason']}" for b in self.first[:SHOW_BAD_LINES])
        more = f" (first {SHOW_BAD_LINES} shown)" if self.count > SHOW_BAD_LINES else ""
        raise MalformedInputError(
            f"{name}: {self.count:,} malformed {plural('line', self.count)} in the first {lines_read:,} "
            f"{plural('line', lines_read)} read, more than `max_bad_lines` {self.max_bad_lines:,}{more}: {shown}; "
            f"fix the input or pass `max_bad_lines` N to skip up to N malformed lines.",
            bad=self, lines_read=lines_read)

    def to_json(self) -> dict[str, Any]:
        return {"num_bad_lines": self.count, "bad_lines": list(self.first)}


# --------------------------------------------------------------------------
# reading
# --------------------------------------------------------------------------
@dataclass
class Chunk:
    """Complete lines of one input file, its blank lines left out (module docstring, "Blank lines")."""

    file: str  # display name (the path as given)
    first_line: int  # 1-based line number of the chunk's first line
    data: bytes  # complete lines; the last one may lack its newline at EOF
    progress: int  # bytes of the underlying (possibly compressed) file consumed so far
    num_blank: int = 0  # blank lines left out of ``data``
    line_numbers: np.ndarray | None = None  # each line's number where blank lines were left out

    def line_of(self, k):
        """The 1-based line number in the file of line ``k`` of ``data`` (an int or an array of them)."""
        return self.first_line + k if self.line_numbers is None else self.line_numbers[k]


def check_inputs(paths: Sequence[str | os.PathLike], *, streams: bool = False, fmt: str = "") -> list[Path]:
    """Every input must be a readable file; one clear error otherwise.

    ``streams``: the importer reads each input once from start to end, so a
    pipe or device (``<(zcat f.gz)``, ``/dev/stdin``) is accepted; otherwise
    only regular files are (the importer reads the header separately).
    """
    if not paths:
        raise ImportDataError("no input files given; pass at least one INPUT path.")
    out = []
    for p in paths:
        p = Path(p)
        if not p.exists():
            if p.is_symlink():  # exists() is False for a symlink to nowhere and for a loop
                raise ImportDataError(f"{p} is a symbolic link that points nowhere or loops (to "
                                      f"{os.readlink(p)}); point it at the data file or pass the file itself.")
            if str(p) == "-":  # the Unix convention for standard input, which gmp does not follow
                raise ImportDataError(f"-: no such file (gmp takes no '-' for standard input); {_stdin_fix(fmt)}")
            raise ImportDataError(f"{p}: no such file; check the INPUT path.")
        if p.is_dir():
            raise ImportDataError(f"{p} is a directory; pass the data file(s) inside it.")
        if not os.access(p, os.R_OK):
            raise ImportDataError(f"{p}: permission denied; make the file readable.")
        if not streams and not p.is_file():
            raise ImportDataError(f"{p} is not a regular file (a pipe or device); the {fmt + ' ' if fmt else ''}importer reads "
                                  f"the header before the data: save the input to a file first.")
        out.append(p)
    return out


#: the formats whose importer reads each input once from start to end, so a pipe (/dev/stdin) serves
PIPE_FORMATS = ("criteo", "libsvm", "libfm", "libffm")


def _stdin_fix(fmt: str) -> str:
    """How to give standard input to the importer of ``fmt`` ("": recognition, which reads ahead)."""
    if fmt in PIPE_FORMATS:
        return "read standard input as /dev/stdin."
    if not fmt:
        return (f"read standard input as /dev/stdin, with FORMAT one of {', '.join(PIPE_FORMATS)} (the importers "
                f"that read a pipe).")
    return f"the {fmt} importer reads the header before the data, so it cannot read a pipe: save the input to a file."


#: a UTF-8 byte-order mark (Excel and some exports start files with it)
BOM = b"\xef\xbb\xbf"
#: the bytes a blank line is made of (module docstring, "Blank lines"): what ``bytes.strip()`` strips
BLANK = b" \t\n\v\f\r"
_BLANK_BYTES = np.isin(np.arange(256), list(BLANK))


def _open(path: Path) -> tuple[BinaryIO, BinaryIO]:
    """(stream to read, raw file for progress); gzip is detected by magic bytes, without seeking
    (so pipes work)."""
    try:
        raw = open(path, "rb")
    except OSError as exc:
        raise ImportDataError(f"cannot read {path}: {exc.strerror}.") from None
    try:
        magic = raw.peek(2)[:2]
    except OSError as exc:
        raw.close()
        raise ImportDataError(f"cannot read {path}: {exc.strerror}.") from None
    if magic == b"\x1f\x8b":
        return gzip.GzipFile(fileobj=raw, mode="rb"), raw
    return raw, raw


def _position(raw: BinaryIO, fallback: int) -> int:
    """Bytes of the underlying file consumed (``fallback`` for a pipe, which has no position)."""
    try:
        return raw.tell()
    except OSError:
        return fallback


def _read(stream: BinaryIO, path: Path, size: int, line: int) -> bytes:
    """Up to ``size`` bytes (fewer only at the end); ``line`` is the number of the next line to complete.

    Read piece by piece (``read1``) so that, when a gzip stream is cut short,
    the lines decompressed before the cut are counted in the message.
    """
    parts: list[bytes] = []
    got = 0
    try:
        while got < size:
            piece = stream.read1(size - got)
            if not piece:
                break
            parts.append(piece)
            got += len(piece)
    except EOFError:
        done = line - 1 + sum(p.count(b"\n") for p in parts)
        raise ImportDataError(
            f"{path}: truncated gzip file (the compressed stream ends before its end marker, after {done} complete "
            f"line(s)); re-download or re-compress the file."
        ) from None
    except (gzip.BadGzipFile, zlib.error) as exc:
        near = line + sum(p.count(b"\n") for p in parts)
        raise ImportDataError(f"{path}: corrupt gzip data near line {near} ({exc}); re-download the file.") from None
    except OSError as exc:
        raise ImportDataError(f"cannot read {path}: {exc}.") from None
    return b"".join(parts)


def read_head(path: Path, max_bytes: int) -> bytes:
    """Up to ``max_bytes`` bytes from the start of ``path`` (decompressed when gzip)."""
    stream, raw = _open(path)
    try:
        return _read(stream, path, max_bytes, 1)
    finally:
        stream.close()
        raw.close()


def _line_too_long(path: Path, line: int, offset: int, limit: int) -> ImportDataError:
    size = f"{limit >> 20} MiB" if limit % (1 << 20) == 0 else f"{limit:,} bytes"
    return ImportDataError(
        f"{path} line {line:,} (starting at byte offset {offset:,}): malformed line, more than {size} "
        f"(the longest line gmp reads) without a newline; the input is not line-oriented "
        f"text in this format (binary, or another format): check the file and the format.")


def read_header(path: Path, *, max_line_bytes: int = MAX_LINE_BYTES) -> bytes:
    """The first line of ``path`` (without its newline or a UTF-8 byte-order mark); b"" for an empty file.

    A first line longer than ``max_line_bytes`` is an :class:`ImportDataError` (module docstring).
    """
    stream, raw = _open(path)
    try:
        parts: list[bytes] = []
        size = 0
        while True:
            block = _read(stream, path, 1 << 16, 1)
            if not block:
                break
            nl = block.find(b"\n")
            parts.append(block if nl < 0 else block[:nl])
            size += len(parts[-1])
            if size > max_line_bytes + len(BOM) + 1:  # room for the mark and a CR
                raise _line_too_long(path, 1, 0, max_line_bytes)
            if nl >= 0:
                break
        head = b"".join(parts).rstrip(b"\r").removeprefix(BOM)
        if len(head) > max_line_bytes:
            raise _line_too_long(path, 1, 0, max_line_bytes)
        return head
    finally:
        stream.close()
        raw.close()


def iter_chunks(path: Path, *, chunk_bytes: int = DEFAULT_CHUNK_BYTES, skip_lines: int = 0,
                max_line_bytes: int = MAX_LINE_BYTES) -> Iterator[Chunk]:
    """Yield :class:`Chunk` s of complete lines of ``path`` (plain or gzip, file or pipe).

    ``skip_lines`` leading lines (a header) are dropped; line numbers still
    count them. A UTF-8 byte-order mark at the start is dropped, and so are blank
    lines at the very end; a blank line before other lines is left out of its chunk
    and counted in :attr:`Chunk.num_blank` (module docstring, "Blank lines").
    A line longer than ``max_line_bytes`` raises :class:`ImportDataError` with its
    line number and byte offset, having read at most a block more than the limit
    (module docstring, "Bounded memory").
    """
    name = str(path)
    stream, raw = _open(path)
    try:
        carry = b""
        long: list[bytes] = []  # the blocks of a line longer than a block, joined once when its newline comes
        long_size = 0  # bytes of that line so far
        line = 1  # number of the first line of ``carry``
        offset = 0  # byte offset (of the decompressed text) of ``carry``
        to_skip = skip_lines
        first = True
        consumed = 0
        while True:
            block = _read(stream, path, chunk_bytes, line)
            consumed += len(block)
            if first and block:
                if block.startswith(BOM):
                    block, offset = block[len(BOM):], len(BOM)
                first = False
            eof = not block
            if not eof and b"\n" not in block:  # the last line of ``carry`` goes on
                if not long:
                    long = [carry]
                    long_size = len(carry) - (carry.rfind(b"\n") + 1)
                    carry = b""
                long.append(block)
                long_size += len(block)
                if long_size - (block[-1:] == b"\r") > max_line_bytes:  # a CR before the newline is not counted
                    head = long[0]
                    start = head.rfind(b"\n") + 1
                    raise _line_too_long(path, line + head.count(b"\n"), offset + start, max_line_bytes)
                continue
            if long:
                carry, long, long_size = b"".join(long), [], 0
            data = carry + block
            base = offset
            if eof:
                carry = b""
                if not data.strip(BLANK):  # blank lines at the very end (an editor's): not data
                    data = b""
            else:
                cut = data.rfind(b"\n")
                data, carry = data[: cut + 1], data[cut + 1 :]
                body = data.rstrip(BLANK)  # blank lines wait for the next block: at the end they are dropped
                end = data.find(b"\n", len(body)) + 1 if body else 0
                if end < len(data):
                    data, carry = data[:end], data[end:] + carry
            offset = base + len(data)
            _check_line_lengths(data, path, line, base, max_line_bytes, every=chunk_bytes > max_line_bytes)
            while to_skip and data:
                nl = data.find(b"\n")
                data = b"" if nl < 0 else data[nl + 1 :]
                line += 1
                to_skip -= 1
            if data:
                yield _without_blank_lines(Chunk(name, line, data, _position(raw, consumed)))
                line += data.count(b"\n") + (0 if data.endswith(b"\n") else 1)
            if eof:
                return
    finally:
        stream.close()
        raw.close()


def _without_blank_lines(chunk: Chunk) -> Chunk:
    """``chunk`` with its blank lines left out (it ends with a line that is not blank: :func:`iter_chunks`)."""
    buf = np.frombuffer(chunk.data, dtype=np.uint8)
    starts = np.flatnonzero(buf == 10) + 1
    starts = np.concatenate(([0], starts[starts < buf.size]))  # of every line
    if not _BLANK_BYTES[buf[starts]].any():  # a blank line starts with a blank byte: most chunks have none
        return chunk
    blank = np.zeros(starts.size, dtype=np.bool_)
    _blank_lines(buf, blank)
    if not blank.any():  # lines that start with a space or tab (an empty first column) but go on
        return chunk
    keep = np.repeat(~blank, np.diff(starts, append=buf.size))
    return Chunk(chunk.file, chunk.first_line, buf[keep].tobytes(), chunk.progress, int(blank.sum()),
                 chunk.first_line + np.flatnonzero(~blank))


def _check_line_lengths(data: bytes, path: Path, line: int, offset: int, limit: int, *, every: bool) -> None:
    """Raise for the first line of ``data`` (its first line is number ``line``, at byte ``offset``) longer
    than ``limit`` bytes. Only the first line can be, unless a block is longer than the limit (``every``):
    the others lie within one block."""
    if len(data) <= limit + 1:
        return
    nl = data.find(b"\n")
    if (len(data) if nl < 0 else nl) - limit > (1 if nl > 0 and data[nl - 1:nl] == b"\r" else 0):
        raise _line_too_long(path, line, offset, limit)
    if not every:
        return
    ends = np.flatnonzero(np.frombuffer(data, dtype=np.uint8) == 10)
    starts = np.concatenate(([0], ends + 1))
    stops = np.append(ends, len(data))
    buf = np.frombuffer(data, dtype=np.uint8)
    lengths = stops - starts
    lengths[lengths > 0] -= buf[stops[lengths > 0] - 1] == 13  # a CR before the newline is not counted
    over = np.flatnonzero(lengths > limit)
    if over.size:
        k = int(over[0])
        raise _line_too_long(path, line + k, offset + int(starts[k]), limit)


def total_size(paths: Sequence[Path]) -> int:
    """Bytes to read (pipes count 0: their size is unknown)."""
    return int(sum(p.stat().st_size for p in paths if p.is_file()))


# --------------------------------------------------------------------------
# compiled kernels
# --------------------------------------------------------------------------
@numba.njit(cache=True, nogil=True)
def _count_lines(buf):  # pragma: no cover - compiled
    n = 0
    for i in range(buf.size):
        if buf[i] == 10:
            n += 1
    if buf.size and buf[buf.size - 1] != 10:
        n += 1
    return n


@numba.njit(cache=True, nogil=True)
def _is_blank_byte(c):  # pragma: no cover - compiled
    return c == 32 or 9 <= c <= 13  # space, \t \n \v \f \r: what bytes.strip() strips (BLANK)


@numba.njit(cache=True, nogil=True)
def _blank_lines(buf, blank):  # pragma: no cover - compiled
    """Mark in ``blank`` (one entry per line of ``buf``) the blank lines."""
    line = 0
    empty = True
    for i in range(buf.size):
        if buf[i] == 10:
            blank[line] = empty
            line += 1
            empty = True
        elif not _is_blank_byte(buf[i]):
            empty = False
    if buf.size and buf[buf.size - 1] != 10:
        blank[line] = empty


@numba.njit(cache=True, nogil=True)
def _tokenize(buf, sep, starts, ends, ncols):  # pragma: no cover - compiled
    max_cols = starts.shape[1]
    line = 0
    col = 0
    start = 0
    n = buf.size
    for i in range(n + 1):
        c = 10 if i == n else buf[i]
        if c == sep:
            if col < max_cols:
                starts[line, col] = start
                ends[line, col] = i
            col += 1
            start = i + 1
        elif c == 10:
            if i == n and (n == 0 or buf[n - 1] == 10):
                break  # the buffer ended with a newline (a last line "x,," has no newline and is kept)
            e = i
            if e > start and buf[e - 1] == 13:  # CRLF
                e -= 1
            if col < max_cols:
                starts[line, col] = start
                ends[line, col] = e
            ncols[line] = col + 1
            # unused columns: empty spans
            for j in range(col + 1, max_cols):
                starts[line, j] = e
                ends[line, j] = e
            line += 1
            col = 0
            start = i + 1
    return line


def tokenize(data: bytes, sep: str, max_cols: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Split complete lines into columns.

    Returns ``(buf, starts, ends, ncols)``: ``buf`` is the chunk as uint8,
    ``starts/ends`` int32 ``[num_lines, max_cols]`` byte spans (columns past a
    line's end are empty spans), ``ncols`` the true column count of each line
    (may exceed ``max_cols``). A trailing ``\\r`` is dropped.
    """
    buf = np.frombuffer(data, dtype=np.uint8)
    n = _count_lines(buf)
    starts = np.empty((n, max_cols), dtype=np.int32)
    ends = np.empty((n, max_cols), dtype=np.int32)
    ncols = np.empty(n, dtype=np.int32)
    got = _tokenize(buf, ord(sep), starts, ends, ncols)
    assert got == n, (got, n)
    return buf, starts, ends, ncols


@numba.njit(cache=True, nogil=True)
def _strip(buf, s, e):  # pragma: no cover - compiled
    """The cell [s, e) without leading and trailing spaces."""
    while s < e and buf[s] == 32:
        s += 1
    while e > s and buf[e - 1] == 32:
        e -= 1
    return s, e


@numba.njit(cache=True, nogil=True)
def open_quotes(buf, starts, ends, ncols, inside):  # pragma: no cover - compiled
    """Lines broken by a quoted cell, which the delimited importers do not read (a pair of quotes around
    a whole cell is all they strip). Per line: ``j + 1`` when cell ``j`` opens a double quote it does
    not close (its separator split the cell, or a newline inside the quotes ended the line), ``-1`` for
    a line that goes on with a cell an earlier line opened (the text after a quoted newline: it would
    otherwise be read as a row of its own), else 0. A line opens such a cell for the next ones when the
    quotes from the cell's start to the line's end are odd in number; it closes when a following line
    holds an odd number. ``inside``: the state at the chunk's start. Returns ``(flags, inside at the
    end)``. A quote inside a cell that does not start with one is text (as Python's csv reads it)."""
    n, k = starts.shape
    out = np.zeros(n, dtype=np.int32)
    for i in range(n):
        stop = starts[i + 1, 0] if i + 1 < n else buf.size
        if inside:
            out[i] = -1
            inside = _quotes(buf, starts[i, 0], stop) % 2 == 0
            continue
        for j in range(min(ncols[i], k)):
            s, e = _strip(buf, starts[i, j], ends[i, j])
            if s < e and buf[s] == 34 and (e - s == 1 or buf[e - 1] != 34):
                out[i] = j + 1
                inside = _quotes(buf, s, stop) % 2 == 1
                break
    return out, inside


@numba.njit(cache=True, nogil=True, inline="always")
def _quotes(buf, s, e):  # pragma: no cover - compiled
    """Double quotes in ``buf[s:e]``."""
    q = 0
    for p in range(s, e):
        q += buf[p] == 34
    return q


@numba.njit(cache=True, nogil=True)
def _cell(buf, s, e):  # pragma: no cover - compiled
    """The cell [s, e) without surrounding spaces and one pair of double quotes around it (``"1"``,
    `` >50K`` after ``, ``): how a number or a label value is read."""
    s, e = _strip(buf, s, e)
    if e - s >= 2 and buf[s] == 34 and buf[e - 1] == 34:
        s, e = _strip(buf, s + 1, e - 1)
    return s, e


@numba.njit(cache=True, nogil=True)
def _parse_int(buf, s, e):  # pragma: no cover - compiled
    # [sign] digits, any int64 (-9223372036854775808 .. 9223372036854775807); returns (value, ok).
    # Accumulated as a negative number, so the most negative int64 is reachable without overflow.
    neg = False
    if buf[s] == 45 or buf[s] == 43:
        neg = buf[s] == 45
        s += 1
    if s == e:
        return 0, False
    floor = -9223372036854775807 - 1 if neg else -9223372036854775807
    v = 0
    for p in range(s, e):
        d = buf[p] - 48
        if d < 0 or d > 9:
            return 0, False
        if v < (floor + d) // 10 + (1 if (floor + d) % 10 else 0):  # v * 10 - d would pass the floor
            return 0, False
        v = v * 10 - d
    return (v if neg else -v), True


@numba.njit(cache=True, nogil=True)
def parse_int_block(buf, starts, ends):  # pragma: no cover - compiled
    """Decimal integers (optional sign, optional ``.0``-free); status per cell."""
    n, k = starts.shape
    vals = np.zeros((n, k), dtype=np.int64)
    status = np.zeros((n, k), dtype=np.int8)
    for i in range(n):
        for j in range(k):
            s, e = _strip(buf, starts[i, j], ends[i, j])
            if s == e:
                status[i, j] = 1
                continue
            v, ok = _parse_int(buf, s, e)
            if ok:
                vals[i, j] = v
            else:
                status[i, j] = 2
    return vals, status


_HEX_VALUE = np.full(256, -1, dtype=np.int8)
for _c, _v in zip(b"0123456789abcdefABCDEF", list(range(16)) + list(range(10, 16))):
    _HEX_VALUE[_c] = _v


@numba.njit(cache=True, nogil=True)
def _parse_hex_block(buf, starts, ends, table):  # pragma: no cover - compiled
    n, k = starts.shape
    vals = np.zeros((n, k), dtype=np.uint64)
    status = np.zeros((n, k), dtype=np.int8)
    for i in range(n):
        for j in range(k):
            s = starts[i, j]
            e = ends[i, j]
            if s == e:
                status[i, j] = 1
                continue
            if e - s > 16:
                status[i, j] = 2
                continue
            v = np.uint64(0)
            bad = 0
            for p in range(s, e):
                d = table[buf[p]]
                bad |= d
                v = (v << np.uint64(4)) | np.uint64(d & 15)
            if bad < 0:  # some digit was -1 (not hexadecimal)
                status[i, j] = 2
                continue
            vals[i, j] = v
    return vals, status


def parse_hex_block(buf, starts, ends):
    """Hexadecimal tokens of 1..16 digits -> uint64 (the value is the key); status per cell."""
    return _parse_hex_block(buf, starts, ends, _HEX_VALUE)


@numba.njit(cache=True, nogil=True)
def _parse_float(buf, s, e):  # pragma: no cover - compiled
    # [sign] digits [. digits] [(e|E) [sign] digits]; returns (value, ok)
    neg = False
    if s < e and (buf[s] == 45 or buf[s] == 43):
        neg = buf[s] == 45
        s += 1
    mant = 0.0
    ndig = 0
    scale = 0
    while s < e and 48 <= buf[s] <= 57:
        mant = mant * 10.0 + (buf[s] - 48)
        s += 1
        ndig += 1
    if s < e and buf[s] == 46:
        s += 1
        while s < e and 48 <= buf[s] <= 57:
            mant = mant * 10.0 + (buf[s] - 48)
            s += 1
            ndig += 1
            scale -= 1
    if ndig == 0:
        return 0.0, False
    if s < e and (buf[s] == 101 or buf[s] == 69):
        s += 1
        eneg = False
        if s < e and (buf[s] == 45 or buf[s] == 43):
            eneg = buf[s] == 45
            s += 1
        ex = 0
        nd = 0
        while s < e and 48 <= buf[s] <= 57:
            ex = ex * 10 + (buf[s] - 48)
            s += 1
            nd += 1
            if ex > 400:
                ex = 400
        if nd == 0:
            return 0.0, False
        scale += -ex if eneg else ex
    if s != e:
        return 0.0, False
    v = mant * 10.0 ** scale if scale >= 0 else mant / 10.0 ** (-scale)
    return (-v if neg else v), True


@numba.njit(cache=True, nogil=True)
def parse_float_block(buf, starts, ends):  # pragma: no cover - compiled
    """Decimal floats (``1``, ``-2.5``, ``3e-4``; spaces and a pair of quotes around them ignored); status
    per cell."""
    n, k = starts.shape
    vals = np.zeros((n, k), dtype=np.float64)
    status = np.zeros((n, k), dtype=np.int8)
    for i in range(n):
        for j in range(k):
            s, e = _cell(buf, starts[i, j], ends[i, j])
            if s == e:
                status[i, j] = 1
                continue
            v, ok = _parse_float(buf, s, e)
            if ok:
                vals[i, j] = v
            else:
                status[i, j] = 2
    return vals, status


_mix64 = mix64  # splitmix64 finaliser (gmp.kernels.hashing): spreads FNV's low-entropy high bits


@numba.njit(cache=True, nogil=True)
def _hash_span(buf, s, e):  # pragma: no cover - compiled
    h = np.uint64(0xCBF29CE484222325)  # FNV-1a 64
    for p in range(s, e):
        h ^= np.uint64(buf[p])
        h *= np.uint64(0x100000001B3)
    return _mix64(h)


@numba.njit(cache=True, nogil=True)
def hash_token_block(buf, starts, ends, strip_quotes, as_cell=False):  # pragma: no cover - compiled
    """64-bit key of every token (FNV-1a + splitmix64); status 1 for empty. ``strip_quotes``: a pair of
    quotes around the token is not part of it; ``as_cell``: nor are spaces around it (:func:`_cell`: a label
    value; categorical values keep their spaces, so their ids do not change)."""
    n, k = starts.shape
    vals = np.zeros((n, k), dtype=np.uint64)
    status = np.zeros((n, k), dtype=np.int8)
    for i in range(n):
        for j in range(k):
            s = starts[i, j]
            e = ends[i, j]
            if as_cell:
                s, e = _cell(buf, s, e)
            elif strip_quotes and e - s >= 2 and buf[s] == 34 and buf[e - 1] == 34:
                s += 1
                e -= 1
            if s == e:
                status[i, j] = 1
                continue
            vals[i, j] = _hash_span(buf, s, e)
    return vals, status


@numba.njit(cache=True, nogil=True)
def split_multi(buf, starts, ends, sep, strip_quotes):  # pragma: no cover - compiled
    """Split each span of a multi-valued column at ``sep``: (lengths, keys)."""
    n = starts.size
    lengths = np.zeros(n, dtype=np.int32)
    total = 0
    for i in range(n):
        s = starts[i]
        e = ends[i]
        if strip_quotes and e - s >= 2 and buf[s] == 34 and buf[e - 1] == 34:
            s += 1
            e -= 1
        if s == e:
            continue
        cnt = 1
        for p in range(s, e):
            if buf[p] == sep:
                cnt += 1
        total += cnt
    keys = np.zeros(total, dtype=np.uint64)
    pos = 0
    for i in range(n):
        s = starts[i]
        e = ends[i]
        if strip_quotes and e - s >= 2 and buf[s] == 34 and buf[e - 1] == 34:
            s += 1
            e -= 1
        if s == e:
            continue
        t = s
        for p in range(s, e + 1):
            if p == e or buf[p] == sep:
                if p > t:  # empty pieces ("a||b") are dropped
                    keys[pos] = _hash_span(buf, t, p)
                    pos += 1
                    lengths[i] += 1
                t = p + 1
    return lengths, keys[:pos]


def cell_text(text: str) -> str:
    """``text`` as :func:`_cell` reads a cell: without the spaces and one pair of double quotes around it."""
    text = text.strip(" ")
    if len(text) >= 2 and text[0] == text[-1] == '"':
        text = text[1:-1].strip(" ")
    return text


def hash_strings(values: Sequence[bytes | str]) -> np.ndarray:
    """The same 64-bit keys as :func:`hash_token_block`, for Python strings."""
    parts = [v.encode() if isinstance(v, str) else v for v in values]
    if not parts:
        return np.zeros(0, dtype=np.uint64)
    data = b"\n".join(parts) + b"\n"
    buf = np.frombuffer(data, dtype=np.uint8)
    lens = np.array([len(p) for p in parts], dtype=np.int64)
    s = np.zeros(len(parts), dtype=np.int64)
    if len(parts) > 1:
        s[1:] = np.cumsum(lens[:-1] + 1)
    e = s + lens
    keys, _ = hash_token_block(buf, s.reshape(-1, 1).astype(np.int32), e.reshape(-1, 1).astype(np.int32), False)
    return keys.reshape(-1)


def token(buf: np.ndarray, s: int, e: int, limit: int = 24) -> str:
    """A token's text for an error message (shortened)."""
    text = bytes(buf[s:e]).decode("utf-8", errors="replace")
    return repr(text if len(text) <= limit else text[:limit] + "…")


def log1p_clamped(values: np.ndarray) -> np.ndarray:
    """``log(1 + max(x, 0))`` as float32 (negative counts clamp to 0 first)."""
    return np.log1p(np.maximum(values, 0).astype(np.float64)).astype(np.float32)


# --------------------------------------------------------------------------
# the shared import driver
# --------------------------------------------------------------------------
@dataclass
class CommonOptions:
    """Options every importer takes (the CLI's shared flags)."""

    min_count: int = 1
    hash_sizes: dict[str, int] = field(default_factory=dict)
    max_bad_lines: int = 0
    test_fraction: float = 0.1
    overwrite: bool = False
    chunk_bytes: int = DEFAULT_CHUNK_BYTES
    test_inputs: tuple[str, ...] = ()  # inputs whose samples are the test set (read last)
    extend: str | None = None  # a prepared dataset whose ids this import keeps (gmp.datasets.extend)

    def __post_init__(self) -> None:
        if self.min_count < 1:
            raise ImportDataError(f"`min_count` must be >= 1, got {self.min_count}.")
        if self.max_bad_lines < 0:
            raise ImportDataError(f"`max_bad_lines` must be >= 0, got {self.max_bad_lines}.")
        if not 0.0 <= self.test_fraction < 1.0:
            raise ImportDataError(f"`test_fraction` must be in [0, 1), got {self.test_fraction}.")
        if self.chunk_bytes < 1:
            raise ImportDataError(f"chunk size must be positive, got {self.chunk_bytes}.")
        if self.chunk_bytes > MAX_CHUNK_BYTES:
            raise ImportDataError(f"`chunk_mb` must be at most {MAX_CHUNK_BYTES >> 20}, got {self.chunk_bytes >> 20}.")
        # a block, its carry-over and the tokenizer's column offsets (8 bytes per column per line)
        check_memory(8 * self.chunk_bytes, what=f"`chunk_mb` {self.chunk_bytes >> 20}", error=ImportDataError,
                     fix="choose a smaller `chunk_mb`.")

    def to_json(self) -> dict[str, Any]:
        out = {"min_count": self.min_count, "hash": dict(self.hash_sizes), "max_bad_lines": self.max_bad_lines,
               "test_fraction": self.test_fraction}
        if self.test_inputs:
            out["test_inputs"] = list(self.test_inputs)
        if self.extend:
            out["extend"] = str(self.extend)
        return out

    def with_test_inputs(self, paths: Sequence[str | os.PathLike]) -> "CommonOptions":
        return dataclasses.replace(self, test_inputs=tuple(str(p) for p in paths))

    def begin_input(self, writer, path: str | os.PathLike) -> None:
        """Tell ``writer`` where the test inputs start (importers call this before each input)."""
        if str(path) in self.test_inputs:
            writer.start_test()


#: formats read by the same importer (a file recognised as one may be imported as the other)
SAME_IMPORTER = {"libsvm": "libfm"}


def same_importer(fmt: str) -> str:
    """The name of the importer that reads ``fmt`` (``libsvm`` and ``libfm`` are one)."""
    return SAME_IMPORTER.get(fmt, fmt)


def _other_format(prev_meta: Mapping[str, Any], fmt: str) -> str:
    """``"the previous dataset is a criteo import and this input is libfm"`` when the dataset an import
    extends was imported from another format than ``fmt`` (its ``source.format``; formats one importer reads
    are one, :func:`same_importer`); "" when the same."""
    source = prev_meta.get("source")
    before = str(source.get("format") or "") if isinstance(source, Mapping) else ""
    if not before or same_importer(before) == same_importer(fmt):
        return ""
    return f"the previous dataset is a{'n' if before[0] in 'aeiou' else ''} {before} import and this input is {fmt}"


def finish_import(writer, vocab, bad: BadLines, *, fmt: str, paths: Sequence[Path], lines_read: int,
                  common: CommonOptions, format_options: dict[str, Any], dense_names: Sequence[str] = (),
                  extra: dict[str, Any] | None = None, dedupe: bool | None = None,
                  discovered_fields: bool = False) -> dict[str, Any]:
    """Check the import produced samples, then write the final arrays and header.

    ``discovered_fields``: the importer found its fields in the data (libsvm, libffm), so a day
    extending another (``--extend``) may lack some of its fields, add new ones or read a field
    multi-valued (:meth:`gmp.datasets.vocab.Vocabulary.finish`); others must match the previous fields.

    ``dedupe`` (default: only when a field is multi-valued) sorts and
    deduplicates each sample's ids in the writer. Without multi-valued fields
    an importer emits one id per field in field order, and fields own
    increasing, disjoint id ranges, so every sample is already sorted and
    duplicate-free; skipping the per-sample sort makes ``finish`` several
    times faster.
    """
    from .format import FieldInfo

    names = ", ".join(str(p) for p in paths)
    if lines_read == 0:
        raise ImportDataError(f"{names}: the input is empty (no data lines); pass a non-empty {fmt} file.")
    if writer.num_samples == 0:
        raise MalformedInputError(
            f"{names}: all {lines_read} data lines were malformed; nothing to import "
            f"(first: {bad.first[0]['file']} line {bad.first[0]['line']}: {bad.first[0]['reason']}).",
            bad=bad, lines_read=lines_read)
    bad.check(name=names, lines_read=lines_read)
    extra = dict(extra or {})
    if common.extend:  # keep the previous dataset's ids, append the new values (gmp.datasets.extend)
        from .extend import parent_link, previous_fields

        prev, prev_meta = previous_fields(common.extend)
        # a refusal below says first that the previous dataset came from another format: its fix (--dense,
        # the columns) may not apply to this one
        other = _other_format(prev_meta, fmt)
        prev_dense = [f.get("name") for f in prev_meta.get("fields", []) if f.get("kind") == "dense"]
        if prev_dense != list(dense_names):  # the model trained on the parent takes this many dense inputs
            if other:
                raise ImportDataError(f"`extend`: {other}: its dense columns are {prev_dense}, this input's "
                                      f"{list(dense_names)}; extend a dataset imported from {fmt}, or import "
                                      f"without `extend`.")
            # no `dense` value says "none": for a parent without dense columns the fix is to give none
            same = f"pass `dense` {','.join(prev_dense)}" if prev_dense else "drop `dense`"
            raise ImportDataError(f"`extend`: the previous dataset's dense columns are {prev_dense}, this input's "
                                  f"{list(dense_names)}; extend with the same dense columns: {same}.")
        try:
            cat_fields, num_embeddings, remap = vocab.finish(prev, int(prev_meta["num_embeddings"]),
                                                             discovered=discovered_fields)
        except ImportDataError as exc:
            if not other:
                raise
            raise ImportDataError(f"`extend`: {other}; {str(exc).removeprefix('`extend`: ')}") from None
        extra["parent"] = parent_link(prev_meta, common.extend)
        extra["new_id_ranges"] = vocab.new_id_ranges
    else:
        cat_fields, num_embeddings, remap = vocab.finish()
    from .extend import VOCAB_FILE, vocab_arrays, vocab_sha256

    members = vocab_arrays(vocab.kept_keys)
    np.savez(writer.tmpdir / VOCAB_FILE, **members)
    extra["vocab_sha256"] = vocab_sha256(members)  # what `extend` checks the file against
    fields = [FieldInfo(n, "dense", 0, None, column=j) for j, n in enumerate(dense_names)] + cat_fields
    source = {"format": fmt, "inputs": [str(p) for p in paths],
              "options": {**common.to_json(), **format_options}, "num_lines": int(lines_read)}
    if bad.num_blank:  # only then: a header without them reads as before
        source["num_blank_lines"] = int(bad.num_blank)
    log.info("%s: %d lines, %d samples, %d bad", names, lines_read, writer.num_samples, bad.count)
    if dedupe is None:  # an extending import's new ids follow all old ones: its samples need sorting
        dedupe = any(f.kind == "multi" for f in cat_fields) or bool(common.extend)
    return writer.finish(fields=fields, num_embeddings=num_embeddings, source=source, remap=remap,
                         test_fraction=common.test_fraction, num_bad_lines=bad.count, bad_lines=bad.first,
                         extra=extra, dedupe=dedupe, chunk_samples=1 << 18)
