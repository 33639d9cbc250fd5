#!/usr/bin/env python3
"""Doxygen input filter for tvlab's Markdown pages (FILTER_PATTERNS in docs/Doxyfile.in).

The pages are written to read well on a code host: math in $...$ and $$...$$, plain headings,
relative links. Doxygen 1.9 wants \\f$...\\f$ and \\f[...\\f], and a label on each page so the
main page can list them with @subpage. This filter rewrites a file on its way into Doxygen;
the files themselves are not changed.
"""
import pathlib
import re
import sys

path = pathlib.Path(sys.argv[1])
text = path.read_text()


def page_label(p: pathlib.Path) -> str:
    """chapters/00_x/README.md -> chapter_00_x, chapters/00_x/lab.md -> chapter_00_x_lab,
    exercises/00_x/exercises.md -> exercises_00_x, docs/glossary.md -> glossary."""
    parts = p.resolve().parts
    if "chapters" in parts:
        chapter = parts[parts.index("chapters") + 1].lower()
        return f"chapter_{chapter}" if p.name == "README.md" else f"chapter_{chapter}_{p.stem.lower()}"
    if "exercises" in parts:
        return f"exercises_{parts[parts.index('exercises') + 1]}".lower()
    return p.stem.lower()


def link_to_page(match: re.Match) -> str:
    """[text](relative/page.md) -> \\ref label "text" when the target is one of our pages."""
    text, target = match.group(1), match.group(2)
    resolved = (path.parent / target).resolve()
    if resolved.exists() and any(part in resolved.parts for part in ("chapters", "exercises", "docs")):
        return f'\\ref {page_label(resolved)} "{text}"'
    return match.group(0)


def convert_math(segment: str) -> str:
    segment = re.sub(r"\$\$(.+?)\$\$", lambda m: "\\f[" + m.group(1) + "\\f]", segment, flags=re.S)
    return re.sub(r"(?<![\\$])\$([^$\n]+?)\$", lambda m: "\\f$" + m.group(1) + "\\f$", segment)


# Math outside code: split on fenced blocks and inline code, convert only the prose.
out = []
for block in re.split(r"(```.*?```)", text, flags=re.S):
    if block.startswith("```"):
        out.append(block)
        continue
    pieces = re.split(r"(`[^`\n]*`)", block)
    out.append("".join(p if p.startswith("`") else convert_math(p) for p in pieces))
text = "".join(out)

# A page label on the first heading (docs/mainpage.md has its own \mainpage).
if path.name != "mainpage.md":
    text = re.sub(r"\A(\s*# [^\n{]+?)\s*\n", lambda m: f"{m.group(1)} {{#{page_label(path)}}}\n", text, count=1)

# Images live in docs/figures (Doxygen's IMAGE_PATH): refer to them by file name.
text = re.sub(r"!\[([^\]]*)\]\((?:\.\./)*docs/figures/([^)]+)\)", r"![\1](\2)", text)

# Links between pages become \ref to the page's label.
text = re.sub(r"\[([^\]]+)\]\((?!http)([^)#]+\.md)\)", link_to_page, text)

# Links to source files are not pages: point them at the code host's path as plain text.
text = re.sub(r"\[([^\]]+)\]\((?!http)([^)]+\.(?:cpp|hpp|cu|py|txt|json))\)", r"\1 (`\2`)", text)
sys.stdout.write(text)
