// MathJax 2 (served from this site, see docs/_hooks.py). pymdownx.arithmatex
// turns the Markdown's $...$ into \(...\) and $$...$$ into \[...\]; the
// notebook page's Markdown cells keep $...$, so both forms are typeset.
window.MathJax = {
  jax: ["input/TeX", "output/CommonHTML"],
  extensions: ["tex2jax.js"],
  TeX: { extensions: ["AMSmath.js", "AMSsymbols.js", "noErrors.js", "noUndefined.js"] },
  tex2jax: {
    inlineMath: [["\\(", "\\)"], ["$", "$"]],
    displayMath: [["\\[", "\\]"], ["$$", "$$"]],
    processEscapes: true,
  },
  showMathMenu: false,
  messageStyle: "none",
};
