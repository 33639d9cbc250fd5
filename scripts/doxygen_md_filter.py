#!/usr/bin/env python3
"""Doxygen input filter for tvlab's Markdown pages (FILTER_PATTERNS in docs/Doxyfile.in).

The pages are written to read well on a code host (CommonMark): math in $...$ and $$...$$,
plain headings, relative links. Doxygen 1.9 reads Markdown differently in a few places, and this
filter rewrites a file on its way into Doxygen so that the HTML shows what the Markdown says
(the files themselves are not changed):

- math: \\f$...\\f$ and \\f[...\\f] in prose; \\\\(...\\\\) in headings, whose titles Doxygen prints
  as plain text (it writes \\ + zero-width joiner + "(", which docs/mathjax_config.js makes MathJax
  read as math);
- emphasis *...* and strong **...** become <em> and <strong>: Doxygen leaves the asterisks when
  the span crosses a line, holds a link or ends in math;
- an inline code span that crosses a line is joined onto one line, and one that holds a ' gets
  two backticks (Doxygen would print the backticks of either);
- a numbered list keeps the numbers written in it (Doxygen restarts every list at 1): a list
  that does not start at 1 becomes <ol start="N">;
- links between pages become \\ref to the page's label (each page gets one on its first heading);
- links to source files point at the file's page (a header) or its source listing (a .cpp/.cu
  file of the libraries); images in docs/figures are referred to by file name.

    doxygen_md_filter.py FILE.md          (writes the filtered page to standard output)
"""
import pathlib
import re
import sys

# What Doxygen reads (INPUT, FILE_PATTERNS and EXCLUDE_PATTERNS in docs/Doxyfile.in): the headers
# have a documented page, the libraries' .cpp/.cu files a source listing. The docs target checks
# that every link the pages make leads to a file (docs/check_html_offline.py).
SOURCE_DIRS = ("reference/src", "optimized/src", "optimized/cuda/src")
HEADER_DIRS = ("reference/include", "optimized/include", "optimized/cuda/include", "exercises", "chapters")


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


def project_root(p: pathlib.Path) -> pathlib.Path:
    """The checkout a page belongs to: the nearest folder above it holding CMakePresets.json."""
    for folder in p.resolve().parents:
        if (folder / "CMakePresets.json").exists():
            return folder
    return p.resolve().parent


def doxygen_page(root: pathlib.Path, relative: str, suffix: str) -> str:
    """Doxygen's HTML page of an input file (suffix ".html") or its source listing ("_source.html").
    Doxygen names a file by its name
    alone when no other input file has it, otherwise by its path below the folder the namesakes
    share; then '_' -> '__', '/' -> '_2', '.' -> '_8' (reference/src/attention.cpp, which
    optimized/src/attention.cpp shares, -> reference_2src_2attention_8cpp_source.html)."""
    name = pathlib.PurePosixPath(relative).name
    namesakes = sorted({f.relative_to(root).as_posix() for d in SOURCE_DIRS + HEADER_DIRS for f in (root / d).rglob(name)
                        if not re.search(r"/(detail|common)/|^(chapters|exercises)/.*\.cpp$", f.relative_to(root).as_posix())})
    if len(namesakes) < 2:
        disk = name
    else:  # drop the leading folders every namesake shares
        folders = [n.split("/")[:-1] for n in namesakes]
        shared = 0
        while all(len(f) > shared and f[shared] == folders[0][shared] for f in folders):
            shared += 1
        disk = "/".join(relative.split("/")[shared:])
    return disk.replace("_", "__").replace("/", "_2").replace(".", "_8") + suffix


class Protected:
    """Pieces of text that later rewrites must not touch (code, converted math), each replaced by a
    placeholder that holds no Markdown character, and put back at the end."""

    def __init__(self):
        self.pieces = []

    def keep(self, piece: str) -> str:
        self.pieces.append(piece)
        return f"\x00{len(self.pieces) - 1}\x00"

    def restore(self, text: str) -> str:
        while "\x00" in text:
            text = re.sub(r"\x00(\d+)\x00", lambda m: self.pieces[int(m.group(1))], text)
        return text


def join_code_spans(text: str) -> str:
    """`a code span that goes on
    to the next line` -> one line (CommonMark reads the line break as a space)."""
    def join(m):
        return re.sub(r"[ \t]*\n[ \t]*", " ", m.group(0))
    # A span: n backticks, anything but a blank line, the same n backticks.
    return re.sub(r"(?<!`)(`+)(?!`)(?:(?!\n[ \t]*\n).)+?(?<!`)\1(?!`)", join, text, flags=re.S)


def quote_safe(span: str) -> str:
    """`a span with a ' followed by a space` -> ``the same span``: Doxygen reads a single backtick
    closed by ' as a quotation (`like this') rather than code; with two backticks it does not."""
    if re.fullmatch(r"`[^`]*'[^`]*`", span):
        return "`" + span + "`"
    return span


def convert_math(text: str, protect: Protected) -> str:
    """$$...$$ -> \\f[...\\f], $...$ -> \\f$...\\f$, and in a heading $...$ -> \\(...\\)."""
    def heading(m):
        return re.sub(r"(?<![\\$])\$([^$\n]+?)\$", lambda n: protect.keep("\\\\(" + n.group(1) + "\\\\)"), m.group(0))
    text = re.sub(r"^#{1,6} .*$", heading, text, flags=re.M)
    text = re.sub(r"\$\$(.+?)\$\$", lambda m: protect.keep("\\f[" + m.group(1) + "\\f]"), text, flags=re.S)
    return re.sub(r"(?<![\\$])\$([^$\n]+?)\$", lambda m: protect.keep("\\f$" + m.group(1) + "\\f$"), text)


def convert_emphasis(text: str) -> str:
    """**strong** -> <strong>, *emphasis* -> <em>, within a paragraph (not across a blank line).
    An opening star follows a space or punctuation and precedes a non-space; a closing one the reverse."""
    span = r"(?<![\w*\\]){stars}(?=[^\s*])((?:(?!\n[ \t]*\n).)+?)(?<=[^\s*\\]){stars}(?![\w*])"
    text = re.sub(span.format(stars=r"\*\*"), r"<strong>\1</strong>", text, flags=re.S)
    return re.sub(span.format(stars=r"\*"), r"<em>\1</em>", text, flags=re.S)


def keep_list_numbers(text: str) -> str:
    """A numbered list that starts at N > 1 becomes <ol start="N"> (Doxygen would restart it at 1).
    A list starts after a blank line (or at the top); its items are 'N. text' at the start of a
    line, each continued by the following lines up to a blank line; the list goes on across blank
    lines while the next item follows."""
    lines = text.split("\n")
    item = re.compile(r"^(\d+)\. (.*)$")
    out, i = [], 0
    while i < len(lines):
        m = item.match(lines[i])
        if not m or (i > 0 and lines[i - 1].strip()):
            out.append(lines[i])
            i += 1
            continue
        first, items = int(m.group(1)), []
        while i < len(lines) and (m := item.match(lines[i])):
            body, i = [m.group(2)], i + 1
            while i < len(lines) and lines[i].strip() and not item.match(lines[i]):
                body.append(lines[i].strip())
                i += 1
            items.append(body)
            j = i
            while j < len(lines) and not lines[j].strip():
                j += 1
            if j < len(lines) and item.match(lines[j]):
                i = j
        if first == 1:  # Doxygen numbers it as written: keep the Markdown
            out += [f"{first + k}. " + "\n   ".join(body) for k, body in enumerate(items)]
        else:
            out += [f'<ol start="{first}">'] + ["<li>" + "\n".join(body) + "</li>" for body in items] + ["</ol>"]
    return "\n".join(out)


def rewrite_links(text: str, path: pathlib.Path) -> str:
    root = project_root(path)

    def to_page(m):
        """[text](relative/page.md) -> \\ref label "text" when the target is one of our pages."""
        label, target = m.group(1), m.group(2)
        resolved = (path.parent / target).resolve()
        if resolved.exists() and any(part in resolved.parts for part in ("chapters", "exercises", "docs")):
            return f'\\ref {page_label(resolved)} "{label}"'
        return m.group(0)

    def to_source(m):
        """[text](relative/file.hpp) -> the header's documentation page; a library .cpp/.cu -> its
        source listing; any other file -> its text and path (it has no page)."""
        label, target = m.group(1), m.group(2)
        resolved = (path.parent / target).resolve()
        try:
            relative = resolved.relative_to(root).as_posix()
        except ValueError:
            relative = target
        in_dirs = lambda dirs: any(relative.startswith(d + "/") for d in dirs) and "/detail/" not in relative
        if resolved.suffix == ".hpp" and in_dirs(HEADER_DIRS[:3]):
            return f'<a href="{doxygen_page(root, relative, ".html")}">{label}</a>'
        if resolved.suffix in (".cpp", ".cu") and in_dirs(SOURCE_DIRS):
            return f'<a href="{doxygen_page(root, relative, "_source.html")}">{label}</a>'
        return f"{label} (`{relative}`)"

    # Images live in docs/figures (Doxygen's IMAGE_PATH): refer to them by file name.
    text = re.sub(r"!\[([^\]]*)\]\((?:\.\./)*docs/figures/([^)]+)\)", r"![\1](\2)", text)
    text = re.sub(r"\[([^\]]+)\]\((?!http)([^)#]+\.md)\)", to_page, text)
    return re.sub(r"\[([^\]]+)\]\((?!http)([^)]+\.(?:cpp|hpp|cu|py|txt|json))\)", to_source, text)


def filter_page(text: str, path: pathlib.Path) -> str:
    protect = Protected()
    # Fenced blocks first (they may hold anything), then inline code, each kept as it is.
    text = re.sub(r"^([ \t]*)(```|~~~).*?^[ \t]*\2[ \t]*$", lambda m: protect.keep(m.group(0)), text, flags=re.S | re.M)
    text = join_code_spans(text)
    text = re.sub(r"(?<!`)(`+)(?!`).+?(?<!`)\1(?!`)", lambda m: protect.keep(quote_safe(m.group(0))), text)
    text = convert_math(text, protect)
    text = rewrite_links(text, path)
    text = convert_emphasis(text)
    text = keep_list_numbers(text)
    # A page label on the first heading (docs/mainpage.md has its own \mainpage).
    if path.name != "mainpage.md":
        text = re.sub(r"\A(\s*# [^\n{]+?)\s*\n", lambda m: f"{m.group(1)} {{#{page_label(path)}}}\n", text, count=1)
    return protect.restore(text)


if __name__ == "__main__":
    page = pathlib.Path(sys.argv[1])
    sys.stdout.write(filter_page(page.read_text(), page))
