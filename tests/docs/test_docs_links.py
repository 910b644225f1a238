"""Every link in the README and the docs resolves inside the repository."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCS = sorted([*ROOT.glob("*.md"), *ROOT.glob("docs/*.md")])
LINK = re.compile(r"(?<!\!)\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
FENCE = re.compile(r"^```.*?^```", re.S | re.M)


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to -."""
    text = re.sub(r"[`*_]|\[([^\]]*)\]\([^)]*\)", r"\1", heading.strip()).lower()
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def anchors(md: Path) -> set[str]:
    text = FENCE.sub("", md.read_text())
    seen: dict[str, int] = {}
    out = set()
    for h in re.findall(r"^#{1,6}\s+(.+?)\s*#*$", text, re.M):
        s = slug(h)
        n = seen.get(s, 0)
        seen[s] = n + 1
        out.add(s if n == 0 else f"{s}-{n}")
    return out | set(re.findall(r"<a\s+(?:id|name)=\"([^\"]+)\"", text))  # explicit anchors


def links(md: Path) -> list[str]:
    return LINK.findall(FENCE.sub("", md.read_text()))


def test_there_are_docs_to_check():
    assert ROOT / "README.md" in DOCS and ROOT / "docs" / "operate.md" in DOCS


@pytest.mark.parametrize("md", DOCS, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_link_resolves_inside_the_repository(md):
    bad = []
    for target in links(md):
        if re.match(r"^[a-z][a-z0-9+.-]*:", target, re.I):
            bad.append(f"{target}: points outside the repository")
            continue
        path, _, anchor = target.partition("#")
        dest = (md.parent / path).resolve() if path else md
        if not dest.is_relative_to(ROOT):
            bad.append(f"{target}: leaves the repository")
        elif not dest.exists():
            bad.append(f"{target}: no such file")
        elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
            bad.append(f"{target}: no heading #{anchor} in {dest.relative_to(ROOT)}")
    assert bad == [], f"{md.relative_to(ROOT)}: " + "; ".join(bad)


@pytest.mark.parametrize("name", ["compose.yaml", "Dockerfile", "Procfile", "Makefile"])
def test_files_named_in_the_deploy_files_exist(name):
    text = (ROOT / name).read_text()
    named = set(re.findall(r"(?<![\w/.-])((?:[\w-]+/)*[\w-]+\.md)\b", text))
    missing = sorted(n for n in named if not (ROOT / n).exists())
    assert missing == [], f"{name} names missing files {missing}"


def test_the_link_check_catches_a_dead_link(tmp_path):
    md = tmp_path / "x.md"
    md.write_text(
        "# Title\n[a](missing.md) [b](#title) [c](https://example.com)\n```\n[d](ignored)\n```\n"
        '<a id="old-name"></a>\n## Two words, `code`\n'
    )
    assert links(md) == ["missing.md", "#title", "https://example.com"]
    assert anchors(md) == {"title", "old-name", "two-words-code"}
