// MathJax 2, served from this site (docs/_hooks.py copies the files of the
// jupyter-server-mathjax package: TeX input, HTML-CSS output, STIX-Web fonts).
// pymdownx.arithmatex turns the Markdown's $...$ into \(...\) and $$...$$
// into \[...\]; the notebook's Markdown cells keep $...$: both are typeset.
window.MathJax = {
  config: ["TeX-AMS-MML_HTMLorMML-full.js"],
  TeX: { extensions: ["AMSmath.js", "AMSsymbols.js", "noErrors.js", "noUndefined.js"] },
  tex2jax: {
    inlineMath: [["\\(", "\\)"], ["$", "$"]],
    displayMath: [["\\[", "\\]"], ["$$", "$$"]],
    processEscapes: true,
  },
  "HTML-CSS": { availableFonts: [], preferredFont: null, webFont: "STIX-Web", imageFont: null },
  showMathMenu: false,
  messageStyle: "none",
};
