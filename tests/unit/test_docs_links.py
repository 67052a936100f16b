"""Every relative link and image in the docs resolves: README.md, docs/*.md and docs/history/*.md.

A link's path must name an existing file or folder (relative to the file that holds it); a
`#anchor` into one of our markdown files must name one of its headings, spelt as GitHub spells
heading anchors (lower case, punctuation dropped, spaces to hyphens, `-1`, `-2` for repeats).
Links inside code (fenced blocks and inline spans) are text, not links, and are skipped.
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

_FENCE = re.compile(r"^(```|~~~).*?^\1", re.MULTILINE | re.DOTALL)
_CODE_SPAN = re.compile(r"`[^`]*`")
_LINK = re.compile(r"!?\[[^\]]*\]\(\s*([^)\s]+)[^)]*\)")
_HEADING = re.compile(r"^#{1,6}[ \t]+(.+?)[ \t#]*$", re.MULTILINE)
_SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*:")


def doc_files(root: Path = ROOT) -> list[Path]:
    """The markdown files whose links are checked."""
    docs = root / "docs"
    return [root / "README.md", *sorted(docs.glob("*.md")), *sorted(docs.glob("history/*.md"))]


def _without_code(text: str) -> str:
    return _CODE_SPAN.sub("", _FENCE.sub("", text))


def anchor_of(heading: str) -> str:
    """GitHub's anchor for a heading's text (before the -N suffix of a repeated heading)."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link in a heading: its text
    text = re.sub(r"[^\w\- ]", "", text.strip().lower())
    return text.replace(" ", "-")


def heading_anchors(text: str) -> set[str]:
    """Every anchor a markdown text's headings give, repeats numbered as GitHub numbers them."""
    seen: dict[str, int] = {}
    anchors = set()
    for match in _HEADING.finditer(_FENCE.sub("", text)):
        base = anchor_of(match.group(1))
        count = seen.get(base, 0)
        seen[base] = count + 1
        anchors.add(base if count == 0 else f"{base}-{count}")
    return anchors


def relative_links(text: str) -> list[str]:
    """The targets of a markdown text's links and images, external ones (with a scheme) left out."""
    targets = (m.group(1) for m in _LINK.finditer(_without_code(text)))
    return [t for t in targets if not _SCHEME.match(t)]


def broken_links(path: Path) -> list[str]:
    """The links of one markdown file that do not resolve, each with the reason."""
    broken = []
    for target in relative_links(path.read_text()):
        file_part, _, anchor = target.partition("#")
        dest = (path.parent / file_part).resolve() if file_part else path
        if not dest.exists():
            broken.append(f"{target}: no such file")
        elif anchor and dest.suffix == ".md" and anchor not in heading_anchors(dest.read_text()):
            broken.append(f"{target}: no heading with that anchor in {dest.name}")
    return broken


def test_every_relative_link_and_image_in_the_docs_resolves() -> None:
    files = doc_files()
    assert (ROOT / "docs" / "RESULTS.md") in files
    broken = {str(f.relative_to(ROOT)): bad for f in files if (bad := broken_links(f))}
    assert broken == {}


def test_anchors_are_spelt_as_github_spells_them() -> None:
    text = (
        "# Results\n## Scenario (what `sudo ./scripts/main.sh` runs)\n"
        "### Switch buffer models (`--buffer-model`) [S/A]\n"
        "## The same on kv-heavy at 47 req/s (issue 21 item 5)\n## Notes\n## Notes\n"
        "```\n# not a heading\n```\n"
    )
    assert heading_anchors(text) == {
        "results",
        "scenario-what-sudo-scriptsmainsh-runs",
        "switch-buffer-models---buffer-model-sa",
        "the-same-on-kv-heavy-at-47-reqs-issue-21-item-5",
        "notes",
        "notes-1",
    }


def test_a_missing_file_or_heading_is_reported_and_code_is_skipped(tmp_path: Path) -> None:
    (tmp_path / "img").mkdir()
    (tmp_path / "img" / "a.png").write_bytes(b"")
    (tmp_path / "other.md").write_text("# Other\n## Its section\n")
    doc = tmp_path / "doc.md"
    doc.write_text(
        "# Doc\n![a](img/a.png) ![b](img/b.png) [s](other.md#its-section) [t](other.md#gone)\n"
        "[self](#doc) [web](https://example.org/x) `[code](nowhere.md)`\n"
        "```\n[fenced](nowhere.md)\n```\n"
    )
    assert broken_links(doc) == [
        "img/b.png: no such file",
        "other.md#gone: no heading with that anchor in other.md",
    ]
