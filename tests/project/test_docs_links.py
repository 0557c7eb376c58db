"""Links into the docs hold when a page is split: every relative link of docs/*.md and README.md reaches a file
and, with a #fragment, a heading of it; every ``docs/<PAGE>.md`` named in the source, the suites, the scripts
and the docs is a page; every ``docs/<PAGE>.md, "Section"`` names a heading of that page or a paragraph's lead-in."""

from __future__ import annotations

import os
import re
from pathlib import Path

from conftest import ROOT

DOCS = ROOT / "docs"
#: folders whose files are not the project's text (environments, build and run outputs, caches)
SKIPPED_FOLDERS = {".git", ".venv", "build", "results", "__pycache__", "node_modules", ".pytest_cache",
                   ".ruff_cache", "perflogs"}
TEXT_SUFFIXES = {".py", ".pyx", ".pxd", ".md", ".yaml", ".yml", ".sh", ".toml"}
#: a relative markdown link: [text](target)
LINK = re.compile(r"\]\(([^)\s]+)\)")
#: a page named in text: docs/GATE.md
PAGE = re.compile(r"\bdocs/([A-Z][A-Z0-9-]*\.md)\b")
#: a section named in text: docs/GATE.md, "Same-job comparison" (also [docs/GATE.md](GATE.md), "...")
SECTION = re.compile(r'\bdocs/([A-Z][A-Z0-9-]*\.md)(?:\]\([^)]*\))?,? "([^"]+)"')
HEADING = re.compile(r"(#{1,6}) (.*)")
BOLD_LEAD = re.compile(r"^\s*(?:[-*] )?\*\*([^*]+)\*\*")


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces as hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def outside_code(text: str) -> list[str]:
    """The lines of a markdown page outside its fenced code blocks."""
    lines, fenced = [], False
    for line in text.splitlines():
        if line.startswith("```"):
            fenced = not fenced
        elif not fenced:
            lines.append(line)
    return lines


def anchors(page: Path) -> set[str]:
    found: set[str] = set()
    seen: dict[str, int] = {}
    for line in outside_code(page.read_text()):
        heading = HEADING.match(line)
        if heading:
            anchor = slug(heading.group(2))
            count = seen.get(anchor, 0)
            seen[anchor] = count + 1
            found.add(anchor if count == 0 else f"{anchor}-{count}")
    return found


def section_names(page: Path) -> list[str]:
    """What a quoted section name may be: a heading, or the bold lead-in or first words of a paragraph."""
    names = []
    for line in outside_code(page.read_text()):
        heading, lead = HEADING.match(line), BOLD_LEAD.match(line)
        names.append(" ".join((heading.group(2) if heading else lead.group(1) if lead else line).split()).lower())
    return names


def project_text_files() -> list[Path]:
    files = []
    for folder, subfolders, names in os.walk(ROOT):
        subfolders[:] = [name for name in subfolders if name not in SKIPPED_FOLDERS and not name.endswith(".egg-info")]
        files += [Path(folder, name) for name in names if Path(name).suffix in TEXT_SUFFIXES]
    return sorted(files)


def test_every_docs_link_reaches_its_page_and_heading():
    broken = []
    for page in [*sorted(DOCS.glob("*.md")), ROOT / "README.md"]:
        for target in LINK.findall(page.read_text()):
            if re.match(r"[a-z]+:", target):
                continue
            path, _, fragment = target.partition("#")
            dest = (page.parent / path).resolve() if path else page
            if not dest.exists():
                broken.append(f"{page.relative_to(ROOT)}: {target} (no such file)")
            elif fragment and dest.suffix == ".md" and fragment not in anchors(dest):
                broken.append(f"{page.relative_to(ROOT)}: {target} (no such heading in {dest.name})")
    assert not broken, f"links that lead nowhere: {broken}"


def test_every_page_and_section_named_exists():
    pages = {page.name: page for page in DOCS.glob("*.md")}
    names = {name: section_names(page) for name, page in pages.items()}
    broken = []
    for file in project_text_files():
        text = file.read_text(errors="replace")
        where = file.relative_to(ROOT)
        broken += [f"{where}: docs/{name} (no such page)" for name in set(PAGE.findall(text)) if name not in pages]
        for name, section in SECTION.findall(text):
            wanted = " ".join(section.split()).lower()
            if name in names and not any(wanted in candidate for candidate in names[name]):
                broken.append(f'{where}: docs/{name}, "{section}" (no such section)')
    assert not broken, f"pages or sections named that are not there: {broken}"


def test_anchors_and_section_names_as_github_reads_them(tmp_path):
    page = tmp_path / "page.md"
    page.write_text("# Title\n\n## Site facts and the job's fit\n\n**Completion.** Each call waits.\n"
                    "```\n# not a heading\n```\n")
    assert anchors(page) == {"title", "site-facts-and-the-jobs-fit"}
    names = section_names(page)
    assert "completion." in names and "site facts and the job's fit" in names and "# not a heading" not in names
