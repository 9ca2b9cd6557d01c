#!/usr/bin/python3
"""Checks every relative link of the project's Markdown: README.md, CONTRIBUTING.md and every
.md file under docs/ (and those they link to inside the repository, e.g. perf/RESULTS.md), that
the file or directory exists and that an #anchor names a heading of the target (GitHub's
slugs: lower case, punctuation dropped, spaces to hyphens, -1, -2, ... for repeats).
Links to other sites (http:, https:, mailto:) are not fetched. Exit 1 naming every dead link
as FILE:LINE: LINK: what is wrong.
Usage: scripts/check_links.py [ROOT]   (`make check-links`; CI runs it)"""

import re
import sys
from pathlib import Path

ROOT = Path(sys.argv[1] if len(sys.argv) > 1 else Path(__file__).resolve().parent.parent).resolve()
LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
CODE_SPAN = re.compile(r"(`+)(?:(?!\1).)+?\1")
HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")
HTML_ANCHOR = re.compile(r"<a\s+(?:name|id)=\"([^\"]+)\"")


def lines_outside_code(text):
    """(line number, line) of every line outside fenced code blocks."""
    fence = None
    for number, line in enumerate(text.splitlines(), 1):
        stripped = line.lstrip()
        if fence is None and (stripped.startswith("```") or stripped.startswith("~~~")):
            fence = stripped[:3]
            continue
        if fence is not None:
            if stripped.startswith(fence):
                fence = None
            continue
        yield number, line


def slug(heading):
    text = CODE_SPAN.sub(lambda m: m.group(0).strip("`"), heading)
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", text)  # a link in a heading: its text
    text = text.strip().lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


_anchors = {}


def anchors(path):
    if path not in _anchors:
        seen, result = {}, set()
        for _, line in lines_outside_code(path.read_text(encoding="utf-8")):
            result.update(HTML_ANCHOR.findall(line))
            m = HEADING.match(line)
            if not m:
                continue
            base = slug(m.group(2))
            n = seen.get(base, 0)
            seen[base] = n + 1
            result.add(base if n == 0 else f"{base}-{n}")
        _anchors[path] = result
    return _anchors[path]


def check(path, problems, queue):
    for number, line in lines_outside_code(path.read_text(encoding="utf-8")):
        for target in LINK.findall(CODE_SPAN.sub("", line)):
            if re.match(r"^[a-z][a-z0-9+.-]*:", target):
                continue  # another site: not checked
            where = f"{path.relative_to(ROOT)}:{number}: {target}"
            file_part, _, anchor = target.partition("#")
            dest = (path.parent / file_part).resolve() if file_part else path
            if not dest.exists():
                problems.append(f"{where}: {file_part} does not exist")
                continue
            try:
                dest.relative_to(ROOT)
            except ValueError:
                problems.append(f"{where}: leads outside the repository")
                continue
            if anchor:
                if dest.suffix != ".md" or dest.is_dir():
                    problems.append(f"{where}: an anchor into a file that is not Markdown")
                elif anchor not in anchors(dest):
                    problems.append(f"{where}: no heading '#{anchor}' in {dest.relative_to(ROOT)}")
            if dest.suffix == ".md" and dest.is_file():
                queue.append(dest)


def main():
    start = [ROOT / "README.md", ROOT / "CONTRIBUTING.md", *sorted((ROOT / "docs").rglob("*.md"))]
    queue, done, problems = [p for p in start if p.exists()], set(), []
    while queue:
        path = queue.pop()
        if path in done:
            continue
        done.add(path)
        check(path, problems, queue)
    for p in problems:
        print(p)
    print(f"check_links: {len(done)} files, {len(problems)} dead link(s)")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
