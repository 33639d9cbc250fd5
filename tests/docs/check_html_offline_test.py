#!/usr/bin/env python3
"""Tests of docs/check_html_offline.py (the docs target's offline check) on small HTML folders.

    check_html_offline_test.py PATH/TO/check_html_offline.py
"""
import pathlib
import subprocess
import sys
import tempfile
import unittest

CHECK = pathlib.Path(sys.argv.pop(1) if len(sys.argv) > 1 else "docs/check_html_offline.py").resolve()


def run_check(files: dict) -> subprocess.CompletedProcess:
    """Writes `files` (name -> text) into a fresh folder and runs the check on it."""
    with tempfile.TemporaryDirectory() as folder:
        for name, text in files.items():
            (pathlib.Path(folder) / name).parent.mkdir(parents=True, exist_ok=True)
            (pathlib.Path(folder) / name).write_text(text)
        return subprocess.run([sys.executable, str(CHECK), folder], capture_output=True, text=True)


def page(head: str, body: str = "<p>text</p>") -> str:
    return f"<!DOCTYPE html><html><head>{head}</head><body>{body}</body></html>\n"


class OfflineCheck(unittest.TestCase):
    def assert_passes(self, files):
        result = run_check(files)
        self.assertEqual(result.returncode, 0, f"a clean folder was rejected:\n{result.stderr}")

    def assert_fails(self, files, expected_in_message):
        result = run_check(files)
        self.assertEqual(result.returncode, 1, f"the check let this folder pass: {files}")
        self.assertIn(expected_in_message, result.stderr)

    def test_local_scripts_and_stylesheets_pass(self):
        self.assert_passes({
            "index.html": page('<script src="mathjax/MathJax.js"></script><link href="doxygen.css" rel="stylesheet">'),
            "mathjax/MathJax.js": "",
            "doxygen.css": "body {}",
        })

    def test_links_to_remote_pages_are_not_loads(self):
        # An <a href> to a paper is a link the reader follows, not code the page runs.
        self.assert_passes({"index.html": page("", '<a href="https://arxiv.org/abs/1706.03762">paper</a>')})

    def test_remote_script_fails(self):
        self.assert_fails({"index.html": page('<script src="https://cdn.example.org/mathjax/tex-chtml.js"></script>')},
                          "index.html: remote script https://cdn.example.org/mathjax/tex-chtml.js")

    def test_http_and_protocol_relative_scripts_fail(self):
        self.assert_fails({"a.html": page('<script src="http://example.org/x.js"></script>')}, "remote script")
        self.assert_fails({"b.html": page('<script src="//example.org/x.js"></script>')}, "remote script")

    def test_remote_stylesheet_fails(self):
        self.assert_fails({"index.html": page('<link rel="stylesheet" href="https://fonts.example.org/a.css">')},
                          "remote stylesheet https://fonts.example.org/a.css")

    def test_remote_css_import_fails(self):
        self.assert_fails({"index.html": page(""), "style.css": '@import url("https://example.org/x.css");'},
                          "style.css: remote stylesheet (@import)")

    def test_missing_local_script_fails(self):
        self.assert_fails({"index.html": page('<script src="mathjax/MathJax.js"></script>')},
                          "mathjax/MathJax.js is not in the folder")

    def test_broken_local_link_fails(self):
        self.assert_passes({"index.html": page("", '<a href="other.html#part">x</a>'), "other.html": page("")})
        self.assert_fails({"index.html": page("", '<a href="reference_2src_2attention_8cpp_source.html">x</a>')},
                          "index.html: link reference_2src_2attention_8cpp_source.html leads to no file")

    def test_a_folder_without_pages_fails(self):
        result = run_check({"readme.txt": "no pages"})
        self.assertEqual(result.returncode, 1)
        self.assertIn("no .html page", result.stderr)


if __name__ == "__main__":
    unittest.main()
