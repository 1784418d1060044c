"""The paper's model on the command line (`--problem markov`, the default):
a synthetic chain (a family and its parameters, or a transition matrix) or a
text's bigram chain, the embedding width, the model variant and, for SGD, the
context length.

A problem's command-line plugin (`docs/extending.md`, "On the command
line"): `NAME`, `TITLE`, `OPTIONS` (each flag's argparse-like spec),
`FLOW_DEFAULTS`, `SGD_DEFAULTS`, `build(options)` and the optional
`levels_text`, `STAGE_FIELDS`, `EVENT_FIELDS` and `SWEEP_PHASES`. The
command line reads the flags, checks and converts their values and calls
`build`; nothing here runs a solve.
"""

from pathlib import Path

from .._core.files import existing_path, read_array


NAME = "markov"
TITLE = "the paper's one-layer attention model on a Markov chain or a text"

# Each family's parameters, with the library's defaults (gradflow.chains):
# `None` below means "the family's default".
FAMILIES = {
    "sticky": {"d": 6, "top_mass": 0.5, "rho": 0.5, "delta": 0.05},
    "zipf": {"d": 8, "exponent": 1.0, "rho": 0.0},
    "random": {"d": 8, "concentration": 1.0, "exponent": 1.0, "chain_seed": 0},
}
CHAIN_FLAGS = tuple("d top_mass rho delta exponent concentration chain_seed".split())
TEXT_FLAGS = ("vocab_size", "level", "tail", "smoothing")

_TEXT = ("run", "sgd")  # a text's chain: run and sgd (not swept)


def _smoothing(text: str):
    """`--smoothing`: 'auto' or a number (checked by `gf.text.encode`)."""
    if text == "auto":
        return text
    try:
        return float(text)
    except ValueError:
        raise ValueError(
            f"--smoothing must be 'auto' or a number, got {text!r}"
        ) from None


# fmt: off
OPTIONS = {
    "--chain": dict(choices=tuple(FAMILIES), default="sticky", help="chain family"),
    "--transition-matrix": dict(metavar="FILE.npy", type=Path, default=None,
                                shown="none, the --chain family",
                                help="a (d, d) row-stochastic matrix saved with "
                                "numpy.save, instead of --chain and its parameters"),
    "--d": dict(type=int, grid=True, default=None, shown="sticky 6, zipf and random 8",
                help="vocabulary size"),
    "--top-mass": dict(type=float, grid=True, default=0.5,
                       help="sticky: stationary probability of token 0"),
    "--rho": dict(type=float, grid=True, default=None, shown="sticky 0.5, zipf 0",
                  help="sticky, zipf: extra probability of repeating the current "
                  "token"),
    "--delta": dict(type=float, grid=True, default=0.05,
                    help="sticky: asymmetry among the rare tokens (0: exactly "
                    "symmetric)"),
    "--exponent": dict(type=float, grid=True, default=1.0,
                       help="zipf, random: Zipf exponent"),
    "--concentration": dict(type=float, grid=True, default=1.0,
                            help="random: Dirichlet concentration of each row"),
    "--chain-seed": dict(type=int, grid=True, default=0, help="random: seed of the chain"),
    "--text": dict(metavar="PATH", commands=_TEXT, default=None,
                   shown="none, a synthetic chain",
                   help="an existing UTF-8 file or folder (WikiText wiki.train.raw, "
                   "TinyStories .txt), or 'builtin' for Python's documentation "
                   "topics: its bigram chain, instead of --chain"),
    "--vocab-size": dict(metavar="K", type=int, commands=_TEXT, default=30,
                         help="with --text: keep the K-1 most frequent tokens plus "
                         "<other>"),
    "--level": dict(choices=("word", "char", "bpe"), commands=_TEXT, default="word",
                    help="with --text: tokenise by word, character, or byte-level "
                    "BPE trained on the text to --vocab-size tokens"),
    "--tail": dict(choices=("other", "drop"), commands=_TEXT, default="other",
                   help="with --text: tokens outside the vocabulary: one <other> "
                   "token, or removed from the stream"),
    "--smoothing": dict(type=_smoothing, commands=_TEXT, default="auto",
                        help="with --text: pseudo-count added to every bigram "
                        "count, or 'auto' (pseudo-counts 1 %% of the bigram counts)"),
    "--width": dict(type=int, grid=True, default=8, help="embedding width m"),
    "--heads": dict(metavar="H", type=int, min=1, default=1,
                    help="attention heads per layer"),
    "--layers": dict(metavar="L", type=int, min=1, max=2, default=1,
                     help="attention layers"),
    "--value": dict(type=bool, help="a value matrix per head"),
    "--residual": dict(type=bool, help="a residual stream"),
    "--norm": dict(choices=("none", "rms", "layer"), default="none",
                   help="normalisation of each column before W1"),
    "--context": dict(type=int, commands=("sgd",), default=256,
                      help="context length s of the sequences SGD trains on (the "
                      "flow's loss is the infinite-context one)"),
}
# fmt: on

FLOW_DEFAULTS = {"init_scale": 1e-3, "t1": 5000.0}
SGD_DEFAULTS = {"init_scale": 1e-3, "t1": 300.0, "lr": 0.2, "batch_size": 512}

STAGE_FIELDS = tuple(
    "name cycle t_start t_end loss_start loss_end tokens token_labels complete "
    "mass_start mass_end sv_index".split()
)
EVENT_FIELDS = ("name", "t", "loss", "token", "located")

# The sweep's phase diagrams: the stage starts drawn over a swept option,
# and the stage end drawn over the init scale against the linear theory's
# escape time.
SWEEP_PHASES = {
    "values": ("new_direction.t_start", "focus.t_start"),
    "init_scale": ("condensation.t_end", "escape"),
}


def _flag(dest: str) -> str:
    return "--" + dest.replace("_", "-")


def _refuse(options, dests, why: str) -> None:
    """A one-line error for the first of `dests` given on the command line."""
    for dest in dests:
        if dest in options.given:
            raise ValueError(f"{_flag(dest)} does not apply {why}")


def _model(options):
    import gradflow as gf

    return gf.Model(
        heads=options.heads,
        layers=options.layers,
        value=bool(options.value),
        residual=bool(options.residual),
        norm=None if options.norm == "none" else options.norm,
    )


def _family_values(options) -> dict:
    """The given family's parameters, each given value or the family's
    default; a one-line error for a parameter of another family."""
    family = FAMILIES[options.chain]
    for dest in CHAIN_FLAGS:
        if dest not in family and dest in options.given:
            raise ValueError(f"{_flag(dest)} is not a parameter of {options.chain}")
    return {
        k: default if getattr(options, k) is None else getattr(options, k)
        for k, default in family.items()
    }


def chain(options):
    """`(chain, description)` of the chain options: a family and its
    parameters, or a transition matrix."""
    import gradflow as gf

    if options.transition_matrix is not None:
        _refuse(options, ("chain", *CHAIN_FLAGS), "with --transition-matrix")
        P = read_array("--transition-matrix", options.transition_matrix)
        return gf.MarkovChain(P), f"transition matrix from {options.transition_matrix}"
    v = _family_values(options)
    if options.chain == "sticky":
        return gf.chains.sticky(v["d"], v["top_mass"], v["rho"], v["delta"]), (
            f"sticky(d={v['d']}, top_mass={v['top_mass']:g}, rho={v['rho']:g}, "
            f"delta={v['delta']:g})"
        )
    if options.chain == "zipf":
        return gf.chains.zipf(v["d"], v["exponent"], v["rho"]), (
            f"zipf(d={v['d']}, exponent={v['exponent']:g}, rho={v['rho']:g})"
        )
    made = gf.chains.random(
        v["d"],
        seed=v["chain_seed"],
        concentration=v["concentration"],
        exponent=v["exponent"],
    )
    return made, (
        f"random(d={v['d']}, seed={v['chain_seed']}, "
        f"concentration={v['concentration']:g}, exponent={v['exponent']:g})"
    )


def stream(options):
    """The [`gradflow.text.TokenStream`][] of the text options. `--text`
    must name an existing path (or be `builtin`): a mistyped path is an
    error, never read as text."""
    import gradflow.text as text

    source = None
    if options.text != "builtin":
        source = existing_path("--text", options.text, allow=("builtin",))
    return text.encode(
        source,
        options.vocab_size,
        level=options.level,
        smoothing=options.smoothing,
        tail=options.tail,
        progress=options.progress,
    )


def text_description(options) -> str:
    """One line naming the corpus and its settings."""
    corpus = "the built-in corpus" if options.text == "builtin" else f"'{options.text}'"
    return (
        f"bigram chain of {corpus} ({options.level} level, vocab size "
        f"{options.vocab_size}, tail {options.tail}, smoothing {options.smoothing})"
    )


def build(options):
    """`(problem, description)`: the paper's model on the chain or text of the
    options (for SGD, sampling sequences of `--context + 1` tokens of the
    chain, or windows of the text)."""
    import gradflow as gf

    model = _model(options)
    sizes = dict(width=options.width, model=model)
    if options.command == "sgd":
        sizes["context"] = options.context
    if getattr(options, "text", None) is not None:
        _refuse(options, ("chain", "transition_matrix", *CHAIN_FLAGS), "with --text")
        tokens = stream(options)
        source = tokens if options.command == "sgd" else tokens.chain
        problem = gf.as_problem(source, **sizes)
        return problem, f"{text_description(options)}; model: {model.label}"
    _refuse(options, TEXT_FLAGS, "without --text")
    made, description = chain(options)
    problem = gf.as_problem(made, **sizes)
    return problem, f"{description}; model: {model.label}"


def flow_problem(problem):
    """The problem of the flow `gradflow sgd --flow` compares with: the same
    chain, width and model, without the text SGD samples (the flow's loss
    never reads it, and its file need not hold it)."""
    import gradflow as gf

    return gf.problems.MarkovAttention(problem.chain, problem.width, problem.model)


def levels_text(problem) -> str:
    """The reference levels printed after the loss: $\\log d$, $H(\\pi)$ and
    the conditional entropy."""
    import gradflow as gf

    levels = gf.markov.entropy_bounds(problem.chain)
    return (
        f"log d = {levels['log_d']:.5f}, H(pi) = {levels['unigram']:.5f}, "
        f"conditional entropy = {levels['conditional']:.5f}"
    )
