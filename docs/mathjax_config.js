// Headings: Doxygen prints a title as plain text and writes the \( of the math the Markdown filter
// puts there (scripts/doxygen_md_filter.py) as "\", a zero-width joiner, "(". MathJax reads that
// pair as inline math too, so a formula in a heading renders like one in the text.
MathJax.Hub.Config({
  tex2jax: { inlineMath: [["\\(", "\\)"], ["\\\u200d(", "\\\u200d)"]] }
});
