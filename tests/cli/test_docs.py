"""The README stays a front page: at most 300 lines, every command in its table of capabilities with the
page that documents it, every page of docs/ linked, and every link in the README and docs/ resolving."""

from __future__ import annotations

import re
from pathlib import Path

from mfukit.cli.main import COMMANDS

ROOT = Path(__file__).parents[2]
README = ROOT / "README.md"
PAGES = [README, *sorted((ROOT / "docs").glob("*.md"))]
LINK = re.compile(r"\]\(([^)\s]+)\)")
MAX_README_LINES = 300


def _capability_rows() -> list[tuple[list[str], list[str]]]:
    """(commands, linked pages) of each row of the README's table of capabilities."""
    text = README.read_text(encoding="utf-8")
    section = text.split("\n## Capabilities\n", 1)[1].split("\n## ", 1)[0]
    rows = [line for line in section.splitlines() if line.startswith("| ") and not line.startswith("| capab")]
    found = []
    for row in rows:
        cells = [cell.strip() for cell in row.strip("|").split("|")]
        found.append((re.findall(r"`([a-z-]+)`", cells[2]), LINK.findall(cells[3])))
    return found


def _anchor(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, punctuation dropped, blanks as hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def test_readme_is_a_front_page() -> None:
    lines = README.read_text(encoding="utf-8").splitlines()
    assert len(lines) <= MAX_README_LINES, f"README.md has {len(lines)} lines: move sections to docs/"


def test_every_command_is_in_the_table_with_the_page_that_documents_it() -> None:
    rows = _capability_rows()
    listed = [name for commands, _ in rows for name in commands]
    assert sorted(listed) == sorted(COMMANDS), "each command in exactly one row of the README's table"
    for commands, pages in rows:
        assert pages, f"the row of {commands} links no page"
        text = " ".join((ROOT / page).read_text(encoding="utf-8") for page in pages)
        for name in commands:
            assert f"mfukit {name}" in text, f"`mfukit {name}` is in none of {pages}"


def test_every_page_is_linked_from_the_readme() -> None:
    linked = {(ROOT / target.split("#")[0]).resolve() for target in LINK.findall(README.read_text())}
    missing = [page.name for page in PAGES[1:] if page.resolve() not in linked]
    assert missing == [], f"docs/ pages the README does not link: {missing}"


def test_every_link_resolves() -> None:
    broken = []
    for page in PAGES:
        for target in LINK.findall(page.read_text(encoding="utf-8")):
            if "://" in target:
                continue
            path, _, anchor = target.partition("#")
            linked = (page.parent / path).resolve() if path else page
            if not linked.exists():
                broken.append(f"{page.name}: {target}")
            elif anchor and linked.suffix == ".md":
                headings = re.findall(r"^#+ (.+)$", linked.read_text(encoding="utf-8"), flags=re.MULTILINE)
                if anchor not in {_anchor(heading) for heading in headings}:
                    broken.append(f"{page.name}: {target} (no such heading)")
    assert broken == []
