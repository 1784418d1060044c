"""The deep linear network on the command line (`--problem deep-linear`):
Saxe's setting (white inputs, a teacher of given singular values in random
bases) or covariances read from `.npy` files. A problem's command-line
plugin (`docs/extending.md`, "On the command line")."""

from pathlib import Path

from ..._core.files import read_array


NAME = "deep-linear"
TITLE = "a deep linear network on a linear teacher (Saxe, McClelland, Ganguli 2014)"

# fmt: off
OPTIONS = {
    "--singular-values": dict(metavar="S", type=float, nargs="+", above=0.0,
                              default=(3.0, 1.0, 0.3),
                              help="the singular values of sigma_yx (random bases, "
                              "sigma_xx = I)"),
    "--inputs": dict(type=int, grid=True, min=1, default=None,
                     shown="singular values + 2", help="n_in"),
    "--outputs": dict(type=int, grid=True, min=1, default=None,
                      shown="singular values + 1", help="n_out"),
    "--hidden": dict(metavar="H", type=int, nargs="+", min=1, default=None,
                     shown="one layer of n_out units",
                     help="hidden widths, one per hidden layer"),
    "--sigma-xx": dict(metavar="FILE.npy", type=Path, default=None, shown="identity",
                       help="the input covariance (with --sigma-yx)"),
    "--sigma-yx": dict(metavar="FILE.npy", type=Path, default=None,
                       shown="none, built from --singular-values",
                       help="the input-output covariance, instead of "
                       "--singular-values"),
    "--problem-seed": dict(type=int, grid=True, default=0,
                           help="seed of the random singular bases"),
}
# fmt: on

# The last of the default drops (s = 0.3, init 1e-3) ends near t = 25; the
# loss reaches round-off near t = 50.
FLOW_DEFAULTS = {"init_scale": 1e-3, "t1": 60.0}
SGD_DEFAULTS = {"init_scale": 1e-3, "t1": 60.0, "lr": 0.01, "batch_size": 64}


def _refuse(options, flags, why: str) -> None:
    for flag in flags:
        if flag[2:].replace("-", "_") in options.given:
            raise ValueError(f"{flag} does not apply {why}")


def build(options):
    """`(problem, description)` of the options."""
    import numpy as np

    import gradflow as gf

    if options.sigma_yx is not None:
        _refuse(
            options,
            ("--singular-values", "--inputs", "--outputs", "--problem-seed"),
            "with --sigma-yx (the covariances set the sizes)",
        )
        syx = read_array("--sigma-yx", options.sigma_yx)
        shape = np.shape(syx) if np.ndim(syx) == 2 else (1, 1)  # else refused below
        sxx = (
            np.eye(shape[1])
            if options.sigma_xx is None
            else read_array("--sigma-xx", options.sigma_xx)
        )
        hidden = tuple(options.hidden or [min(shape)])
        problem = gf.problems.DeepLinear(sxx, syx, hidden)
        return problem, f"{problem} from {options.sigma_yx}"
    _refuse(options, ("--sigma-xx",), "without --sigma-yx")
    s = list(options.singular_values)
    n_in = len(s) + 2 if options.inputs is None else options.inputs
    n_out = len(s) + 1 if options.outputs is None else options.outputs
    for flag, value in (("--inputs", n_in), ("--outputs", n_out)):
        if value < len(s):
            raise ValueError(
                f"{flag} must be >= the number of singular values ({len(s)}), got "
                f"{value}"
            )
    hidden = tuple(options.hidden or [n_out])
    problem = gf.problems.DeepLinear.random(
        s, n_in=n_in, n_out=n_out, hidden=hidden, seed=options.problem_seed
    )
    what = " ".join(f"{x:g}" for x in s)
    return problem, f"{problem}, singular values {what}, seed {options.problem_seed}"
