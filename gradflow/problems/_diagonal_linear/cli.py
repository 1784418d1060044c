"""The diagonal linear network on the command line (`--problem
diagonal-linear`): the teacher, the inputs' covariance (variances or a whole
matrix), the parametrisation and the labels' noise. A problem's command-line
plugin (`docs/extending.md`, "On the command line")."""

NAME = "diagonal-linear"
TITLE = "a diagonal linear network, saddle to saddle (Pesme and Flammarion 2023)"

# fmt: off
OPTIONS = {
    "--target": dict(metavar="BETA", type=float, nargs="+",
                     default=(5.0, 0.0, 1.0, 0.0, 0.2),
                     help="the teacher beta*, one number per coordinate"),
    "--covariance": dict(metavar="C", type=float, nargs="+", default=None,
                         shown="identity",
                         help="the inputs' covariance: D variances (diagonal) or "
                         "the D*D entries of a matrix, row by row"),
    "--parametrisation": dict(choices=("u2-v2", "uv"), default="u2-v2",
                              help="beta = u^2 - v^2 (start u = v = init_scale) or "
                              "beta = u * v (random start)"),
    "--noise": dict(type=float, grid=True, min=0.0, default=0.0,
                    help="the labels' noise standard deviation"),
}
# fmt: on

# u2-v2 from 1e-4: the default teacher's last jump is at tau = 2.5, t = 23;
# the loss reaches round-off near t = 50.
FLOW_DEFAULTS = {"init_scale": 1e-4, "t1": 60.0}
SGD_DEFAULTS = {"init_scale": 1e-4, "t1": 60.0, "lr": 0.01, "batch_size": 64}


def covariance_of(values, dimension: int):
    """The covariance of `--covariance`: `None` (identity), `D` variances or
    `D*D` entries of a matrix; a one-line error otherwise."""
    import numpy as np

    if values is None:
        return np.eye(dimension)
    values = np.asarray(values, dtype=np.float64)
    if values.size == dimension:
        return values
    if values.size == dimension * dimension:
        return values.reshape(dimension, dimension)
    raise ValueError(
        f"--covariance must be {dimension} variances or {dimension * dimension} "
        f"matrix entries (D = {dimension}, the length of --target), got "
        f"{values.size} numbers"
    )


def build(options):
    """`(problem, description)` of the options."""
    import gradflow as gf

    target = list(options.target)
    problem = gf.problems.DiagonalLinear(
        covariance_of(options.covariance, len(target)),
        target,
        parametrisation=options.parametrisation,
        noise=options.noise,
    )
    what = " ".join(f"{x:g}" for x in target)
    return problem, f"{problem}, target {what}"


def levels_text(problem) -> str:
    """The levels of the saddle-to-saddle path, with their rescaled times."""
    import gradflow as gf

    jumps = gf.theory.saddle_to_saddle(problem)
    return "saddles " + ", ".join(f"{j.loss:.4g} (tau {j.time:.3g})" for j in jumps)
