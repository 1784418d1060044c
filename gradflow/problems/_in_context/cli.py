"""In-context linear regression on the command line (`--problem
in-context`): the covariance's eigenvalues (a diagonal covariance), the
context length, the heads and their key dimension, the labels' noise. A
problem's command-line plugin (`docs/extending.md`, "On the command
line")."""

NAME = "in-context"
TITLE = "in-context linear regression with linear attention (Zhang et al. 2025)"


def _key_dim(text: str):
    """`--key-dim`: an integer >= 1, or 'merged' (merged key-query)."""
    if text == "merged":
        return None
    if text.strip().isdigit() and int(text) >= 1:
        return int(text)
    raise ValueError(f"--key-dim must be an integer >= 1 or 'merged', got {text!r}")


# fmt: off
OPTIONS = {
    "--d": dict(type=int, grid=True, min=1, default=None,
                shown="3, or the number of --eigenvalues",
                help="the inputs' dimension D"),
    "--eigenvalues": dict(metavar="LAMBDA", type=float, nargs="+", above=0.0,
                          default=None, shown="1, 1/2, 1/4, ... (D of them)",
                          help="the eigenvalues of the inputs' covariance "
                          "(diagonal)"),
    "--context": dict(type=int, grid=True, default=16, help="examples N in a sequence"),
    "--heads": dict(metavar="H", type=int, grid=True, min=1, default=3, help="heads H"),
    "--key-dim": dict(metavar="R", type=_key_dim, default=1,
                      help="rows r of each head's key and query, or 'merged' for "
                      "merged key-query"),
    "--noise": dict(type=float, grid=True, min=0.0, default=0.0,
                    help="the labels' noise standard deviation"),
}
# fmt: on

# The plateaus last about 1 / (lambda^2 init_scale): at init 1e-2 the default
# eigenvalues' three directions are half learnt near t = 106, 457 and 2933.
FLOW_DEFAULTS = {"init_scale": 1e-2, "t1": 5000.0}
SGD_DEFAULTS = {"init_scale": 1e-2, "t1": 5000.0, "lr": 0.1, "batch_size": 64}


def build(options):
    """`(problem, description)` of the options."""
    import gradflow as gf

    lam = options.eigenvalues
    if lam is None:
        d = 3 if options.d is None else options.d
        lam = [2.0**-i for i in range(d)]
    elif options.d is not None and options.d != len(lam):
        raise ValueError(
            f"--d must be the number of --eigenvalues ({len(lam)}), got {options.d}"
        )
    problem = gf.problems.InContextRegression(
        list(lam),
        options.context,
        options.heads,
        key_dim=options.key_dim,
        noise=options.noise,
    )
    what = " ".join(f"{x:g}" for x in lam)
    return problem, f"{problem}, eigenvalues {what}"
