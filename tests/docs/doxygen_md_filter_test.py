#!/usr/bin/env python3
"""Tests of scripts/doxygen_md_filter.py (the Markdown -> Doxygen filter) on small pages, one case
per difference between how a code host and Doxygen 1.9 read Markdown.

    doxygen_md_filter_test.py PATH/TO/doxygen_md_filter.py
"""
import importlib.util
import pathlib
import sys
import tempfile
import unittest

FILTER = pathlib.Path(sys.argv.pop(1) if len(sys.argv) > 1 else "scripts/doxygen_md_filter.py").resolve()
spec = importlib.util.spec_from_file_location("doxygen_md_filter", FILTER)
md_filter = importlib.util.module_from_spec(spec)
spec.loader.exec_module(md_filter)


class MarkdownFilter(unittest.TestCase):
    def setUp(self):
        # A small checkout: the chapter page, and the files its links name.
        self.folder = tempfile.TemporaryDirectory()
        root = pathlib.Path(self.folder.name)
        (root / "CMakePresets.json").write_text("{}")
        for name in ("chapters/00_demo/README.md", "chapters/00_demo/lab.md", "chapters/01_next/README.md",
                     "reference/src/attention.cpp", "optimized/src/attention.cpp", "reference/src/sinusoidal.cpp",
                     "optimized/cuda/src/rope.cu", "reference/include/tvlab/ref/attention.hpp",
                     "optimized/include/tvlab/opt/attention.hpp", "reference/include/tvlab/core/mask.hpp",
                     "optimized/src/detail/tiles.hpp"):
            (root / name).parent.mkdir(parents=True, exist_ok=True)
            (root / name).write_text("")
        self.page = root / "chapters/00_demo/lab.md"

    def tearDown(self):
        self.folder.cleanup()

    def run_filter(self, markdown: str) -> str:
        return md_filter.filter_page(markdown, self.page)

    def test_a_list_that_does_not_start_at_1_keeps_its_numbers(self):
        out = self.run_filter("# Lab\n\n## Part 2\n\n5. First question\n   goes on.\n6. Second.\n\n## Part 3\n\n"
                              "7. Third.\n\n8. Fourth.\n")
        self.assertIn('<ol start="5">\n<li>First question\ngoes on.</li>\n<li>Second.</li>\n</ol>', out)
        self.assertIn('<ol start="7">\n<li>Third.</li>\n<li>Fourth.</li>\n</ol>', out)

    def test_a_list_from_1_is_left_to_doxygen(self):
        out = self.run_filter("# Lab\n\n1. one\n   more\n2. two\n")
        self.assertIn("1. one\n   more\n2. two", out)
        self.assertNotIn("<ol", out)

    def test_a_number_inside_a_paragraph_is_not_a_list(self):
        out = self.run_filter("# Lab\n\nThe year was\n2017. It was a good year.\n")
        self.assertNotIn("<ol", out)

    def test_emphasis_across_lines_with_links_and_math(self):
        out = self.run_filter("# Lab\n\n*Chapter: [00 — Demo](README.md). Time: 90 minutes. Setting: one\n"
                              "computer per pair.*\n\n*Previous: [next](../01_next/README.md) ·\nNext: $x$*\n")
        self.assertIn('<em>Chapter: \\ref chapter_00_demo "00 — Demo". Time: 90 minutes. Setting: one\n'
                      'computer per pair.</em>', out)
        self.assertIn('<em>Previous: \\ref chapter_01_next "next" ·\nNext: \\f$x\\f$</em>', out)
        self.assertNotIn("*", out)

    def test_strong_and_emphasis_together(self):
        out = self.run_filter("# Lab\n\n**Bold.** and *emphasis*, a * b and 2*3 stay.\n")
        self.assertIn("<strong>Bold.</strong> and <em>emphasis</em>, a * b and 2*3 stay.", out)

    def test_stars_in_code_and_math_are_not_emphasis(self):
        out = self.run_filter("# Lab\n\nRun `Ch00/Softmax.*` and `*_test.cpp`; $a*b*c$ holds.\n\n"
                              "```sh\nls *.md *.cpp\n```\n")
        self.assertIn("`Ch00/Softmax.*` and `*_test.cpp`", out)
        self.assertIn("\\f$a*b*c\\f$", out)
        self.assertIn("ls *.md *.cpp", out)
        self.assertNotIn("<em>", out)

    def test_a_blank_line_ends_an_emphasis(self):
        out = self.run_filter("# Lab\n\n*not closed\n\nhere* either\n")
        self.assertNotIn("<em>", out)

    def test_inline_code_across_two_lines_is_joined(self):
        out = self.run_filter("# Lab\n\nwhere $i' = i$ (`causal_align =\n   bottom_right`, and $j$).\n")
        self.assertIn("(`causal_align = bottom_right`, and \\f$j\\f$)", out)
        self.assertIn("\\f$i' = i\\f$", out)

    def test_inline_code_with_a_quote_gets_two_backticks(self):
        out = self.run_filter("# Lab\n\nRun (`--filter='a|b' --reps=5`) and `x`.\n")
        self.assertIn("(``--filter='a|b' --reps=5``) and `x`.", out)

    def test_math_is_converted_outside_code_only(self):
        out = self.run_filter("# Lab\n\n$$\\sum_i x_i$$ and $y$, but `$HOME` and\n\n```\necho $PATH $x$\n```\n")
        self.assertIn("\\f[\\sum_i x_i\\f]", out)
        self.assertIn("\\f$y\\f$", out)
        self.assertIn("`$HOME`", out)
        self.assertIn("echo $PATH $x$", out)

    def test_math_in_a_heading(self):
        out = self.run_filter("# Lab\n\n## Why divide by $\\sqrt{d_k}$\n")
        self.assertIn("## Why divide by \\\\(\\sqrt{d_k}\\\\)", out)

    def test_page_label_on_the_first_heading(self):
        self.assertTrue(self.run_filter("# Lab 00 — Demo\n\ntext\n").startswith("# Lab 00 — Demo {#chapter_00_demo_lab}\n"))

    def test_links_to_headers_and_sources(self):
        out = self.run_filter(
            "# Lab\n\n[attention.hpp](../../reference/include/tvlab/ref/attention.hpp), "
            "[mask.hpp](../../reference/include/tvlab/core/mask.hpp), "
            "[attention.cpp](../../reference/src/attention.cpp), [sinusoidal.cpp](../../reference/src/sinusoidal.cpp), "
            "[rope.cu](../../optimized/cuda/src/rope.cu), [tiles.hpp](../../optimized/src/detail/tiles.hpp), "
            "[paper](https://arxiv.org/abs/1706.03762)\n")
        # Namesakes are told apart by their paths below the folders they share, as Doxygen names them.
        self.assertIn('<a href="reference_2include_2tvlab_2ref_2attention_8hpp.html">attention.hpp</a>', out)
        self.assertIn('<a href="mask_8hpp.html">mask.hpp</a>', out)
        self.assertIn('<a href="reference_2src_2attention_8cpp_source.html">attention.cpp</a>', out)
        self.assertIn('<a href="sinusoidal_8cpp_source.html">sinusoidal.cpp</a>', out)
        self.assertIn('<a href="rope_8cu_source.html">rope.cu</a>', out)
        # A file with no page keeps its path in the text; a web link is left to Doxygen.
        self.assertIn("tiles.hpp (`optimized/src/detail/tiles.hpp`)", out)
        self.assertIn("[paper](https://arxiv.org/abs/1706.03762)", out)

    def test_images_by_file_name(self):
        out = self.run_filter("# Lab\n\n![A figure](../../docs/figures/ch00_demo.svg)\n")
        self.assertIn("![A figure](ch00_demo.svg)", out)


if __name__ == "__main__":
    unittest.main()
