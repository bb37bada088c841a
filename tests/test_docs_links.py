"""The docs' relative links: every linked file exists and every ``#anchor`` is one a heading of the target
page produces on GitHub (renamed headings left links pointing nowhere: docs/train.md's tiers links)."""

from __future__ import annotations

import re
import unicodedata
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
FENCE = re.compile(r"^\s{0,3}(`{3,}|~{3,})")
LINK = re.compile(r"\]\(\s*<?([^)\s>]*)>?(?:\s+\"[^\"]*\")?\s*\)")


def slug(heading: str) -> str:
    """GitHub's anchor of a heading: link text kept, HTML dropped, lower case, letters, digits, ``-``, ``_`` and
    spaces kept (each space a ``-``), every other character dropped."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading)
    text = re.sub(r"<[^>]+>", "", text).strip().lower()
    kept = "".join(ch for ch in text if ch in "-_ " or unicodedata.category(ch)[0] in "LN"
                   or unicodedata.category(ch) == "Mn")
    return kept.replace(" ", "-")


def outside_fences(path: Path):
    """``(line number, line)`` of ``path`` outside fenced code blocks."""
    fence = None
    for no, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        m = FENCE.match(line)
        if m:
            mark = m.group(1)[0]
            fence = mark if fence is None else (None if mark == fence else fence)
        elif fence is None:
            yield no, line


def anchors(path: Path) -> set[str]:
    """The anchors of ``path``'s headings (a repeated heading's: ``slug-1``, ``slug-2``, ...) and its HTML ids."""
    seen: dict[str, int] = {}
    found = set()
    for _, line in outside_fences(path):
        found.update(re.findall(r'<a\s+(?:name|id)="([^"]+)"', line))
        h = re.match(r"^#{1,6}\s+(.*?)\s*#*\s*$", line)
        if h:
            s = slug(h.group(1))
            found.add(s if s not in seen else f"{s}-{seen[s]}")
            seen[s] = seen.get(s, 0) + 1
    return found


@pytest.mark.parametrize("heading,expected", [
    ("Tiers (`--table-location host|disk`)", "tiers---table-location-hostdisk"),
    ("`gmp data stats DATASET [--json] [--windows N,N,...]`", "gmp-data-stats-dataset---json---windows-nn"),
    ("Known limitation of `criteo-kaggle-entity`: too few", "known-limitation-of-criteo-kaggle-entity-too-few"),
    ("See [the log](incremental-log.md) <b>now</b>", "see-the-log-now"),
])
def test_slug_of_hand_written_headings(heading, expected):
    assert slug(heading) == expected


def test_a_repeated_heading_gets_a_numbered_anchor(tmp_path):
    page = tmp_path / "p.md"
    page.write_text("# A\n## Usage\n```\n# Usage\n```\n## Usage\n", encoding="utf-8")
    assert anchors(page) == {"a", "usage", "usage-1"}


def test_every_relative_link_and_anchor_of_the_docs_resolves():
    broken = []
    for page in PAGES:
        for no, line in outside_fences(page):
            for target in LINK.findall(line):
                if not target or re.match(r"^[a-z]+:", target):
                    continue
                part, _, anchor = target.partition("#")
                goal = (page.parent / part).resolve() if part else page
                where = f"{page.relative_to(ROOT)}:{no}"
                if not goal.exists():
                    broken.append(f"{where}: {target}: no such file")
                elif anchor and goal.suffix == ".md" and anchor not in anchors(goal):
                    broken.append(f"{where}: {target}: no heading of {goal.relative_to(ROOT)} has that anchor")
    assert len(PAGES) >= 10 and not broken, "\n".join(broken)
