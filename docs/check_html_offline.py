#!/usr/bin/env python3
"""Checks that the generated HTML documentation works offline: run by the docs target.

    check_html_offline.py HTML_DIR

Every script and stylesheet a page loads (<script src=...>, <link rel="stylesheet" href=...>,
and CSS @import) must be a file inside the folder. A remote one (http://, https:// or //host)
fails the check: offline the page would show raw TeX, and a page that runs code from another
server runs whatever that server sends. A local one that is missing fails too (a MathJax copy
that lacks a file), and so does a link (<a href>) to a page or file of the folder that is not
there (a link the Markdown filter computed wrongly). Exit status 1 with one line per problem, 0 when every page is clean.
"""
import html.parser
import pathlib
import re
import sys

REMOTE = re.compile(r"^(?:[a-z][a-z0-9+.-]*:)?//", re.I)  # http://, https://, //host (not data:)
CSS_IMPORT = re.compile(r"@import\s+(?:url\()?\s*['\"]?([^'\")\s;]+)", re.I)


class Loads(html.parser.HTMLParser):
    """Collects the scripts and stylesheets an HTML page loads, with their tags."""

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.loads = []  # (what, address)
        self.links = []  # local <a href> targets
        self.in_style = False

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag == "script" and a.get("src"):
            self.loads.append(("script", a["src"]))
        elif tag == "link" and "stylesheet" in (a.get("rel") or "").lower().split() and a.get("href"):
            self.loads.append(("stylesheet", a["href"]))
        elif tag == "a" and a.get("href") and not REMOTE.match(a["href"]) \
                and not re.match(r"^(#|[a-z][a-z0-9+.-]*:)", a["href"], re.I):
            self.links.append(a["href"])
        elif tag == "style":
            self.in_style = True

    def handle_endtag(self, tag):
        if tag == "style":
            self.in_style = False

    def handle_data(self, data):
        if self.in_style:
            self.loads += [("stylesheet (@import)", url) for url in CSS_IMPORT.findall(data)]


def problems_in(page: pathlib.Path, root: pathlib.Path):
    """The remote or missing scripts and stylesheets one page (.html or .css) loads."""
    text = page.read_text(errors="replace")
    if page.suffix == ".css":
        loads = [("stylesheet (@import)", url) for url in CSS_IMPORT.findall(text)]
    else:
        parser = Loads()
        parser.feed(text)
        loads = parser.loads
        for link in parser.links:
            if not (page.parent / re.split(r"[?#]", link)[0]).resolve().exists():
                yield f"{page.relative_to(root)}: link {link} leads to no file of the folder"
    for what, address in loads:
        where = page.relative_to(root)
        if REMOTE.match(address):
            yield f"{where}: remote {what} {address}"
        elif not address.lower().startswith("data:"):
            local = (page.parent / re.split(r"[?#]", address)[0]).resolve()
            if not local.is_file():
                yield f"{where}: {what} {address} is not in the folder"


def main(argv):
    if len(argv) != 2 or not pathlib.Path(argv[1]).is_dir():
        print("usage: check_html_offline.py HTML_DIR (a folder of generated pages)", file=sys.stderr)
        return 2
    root = pathlib.Path(argv[1]).resolve()
    pages = sorted(p for p in root.rglob("*") if p.suffix in (".html", ".css") and p.is_file())
    if not pages:
        print(f"check_html_offline: no .html page in {root}", file=sys.stderr)
        return 1
    problems = [line for page in pages for line in problems_in(page, root)]
    for line in problems[:20]:
        print(line, file=sys.stderr)
    if problems:
        more = f" ({len(problems) - 20} more not shown)" if len(problems) > 20 else ""
        print(f"check_html_offline: {len(problems)} remote or missing scripts/stylesheets or broken links{more}: "
              "the documentation must work offline (see MATHJAX_RELPATH in docs/Doxyfile.in)", file=sys.stderr)
        return 1
    print(f"check_html_offline: {len(pages)} pages load only local scripts and stylesheets, and their local links resolve")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
