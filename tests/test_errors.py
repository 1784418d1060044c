"""Every bad input gets one clear line, raised before anything is compiled.

`CASES` is the catalogue of `docs/errors.md` (regenerate that page with
`PYTHONPATH=. python docs/_make_errors_table.py`). Each case is `(id, call, error, match)`:
`call(files)` makes one bad call (`files` holds the paths of prepared files: a
real saved trajectory, a truncated copy of it, a foreign `.npz`, ...), `error`
is the exception type it must raise and `match` a regex that must find the
argument's name and the bad value (or what is wrong with it) in the message.
Every message must be a single line.

"Raised before any compilation" is checked by counting compilation events.
JAX reports the duration of every trace, lowering and backend compilation
through `jax.monitoring` (`/jax/core/compile/...`); a listener records them
while the bad call runs, and there must be none. The bad inputs are built from
NumPy arrays outside the counted call, so the count sees only what gradflow
does with them. JAX caches what it has compiled, and a cached computation
emits no event, so JAX's caches are cleared (`jax.clear_caches()`) before
each bad call: then any JAX work at all (a solve's first state or chunk, an
SGD step, the population observables, the Hessian of `linearize`, even one
eager operation) traces and compiles again, and an error raised after any
solving started cannot pass.

The options of `gf.SaveAt`, `gf.Solver`, `gf.Run` and `gf.SGD` are checked
when the option object is made, before any entry point runs; the helpers
below group the options a case names into those objects, inside the call.
"""

import contextlib
import json
import re
import sys
import types
from collections.abc import Callable
from pathlib import Path
from typing import NamedTuple

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import gradflow as gf
from gradflow import plot


_COMPILE_EVENT_PREFIX = "/jax/core/compile/"


class Case(NamedTuple):
    id: str
    call: Callable
    error: type
    match: str


# Inputs, all plain NumPy: building them compiles nothing.
P2 = np.array([[0.9, 0.1], [0.5, 0.5]])
S3 = gf.chains.sticky(3, 0.5, 0.5, 0.05)


def _params(d: int, m: int = 2, fill: float = 1e-2) -> gf.Params:
    return gf.Params(
        np.full((m, d), fill), np.full((d, m), fill), np.eye(m) * fill, np.eye(m) * fill
    )


EYE2 = np.eye(2)
P0 = _params(3)
P0_NAN = gf.Params(
    np.array([[1e-2, np.nan, 1e-2], [1e-2, 1e-2, 1e-2]]), P0.W1, P0.WQ, P0.WK
)
P0_BATCHED = gf.Params(*(np.asarray(x)[None] for x in (P0.W0, P0.W1, P0.WQ, P0.WK)))


def _group(args: dict, names: tuple[str, ...]) -> dict:
    return {k: args.pop(k) for k in names if k in args}


def _integrate(**kwargs):
    """`gf.integrate` on a 3-token chain, quiet, with `kwargs` overriding: the
    options of `gf.Solver` (`rtol`, `atol`, `max_steps`, `dtype`) and of
    `gf.SaveAt` (`ts`, `events`, `callbacks`, `thresholds`) by name."""
    args = dict(chain=S3, init_scale=1e-3, t1=10.0)
    args.update(kwargs)
    chain = args.pop("chain")
    init_scale = args.pop("init_scale")
    solver = _group(args, ("rtol", "atol", "max_steps", "dtype"))
    if solver:
        args["solver"] = gf.Solver(args.pop("solver", None), **solver)
    saveat = _group(args, ("ts", "events", "callbacks", "thresholds"))
    if saveat:
        args["saveat"] = gf.SaveAt(**saveat)
    return gf.integrate(chain, init_scale, run=gf.Run(progress=False), **args)


def _sgd(**kwargs):
    """`gf.train_sgd` on a 3-token chain, small and quiet, `kwargs` overriding:
    the options of `gf.SGD` (`lr`, `batch_size`, `optimizer`,
    `num_sequences`) and the save times `ts` by name."""
    args = dict(
        source=S3, init_scale=1e-2, width=2, context=4, lr=0.1, batch_size=8, t1=1.0
    )
    args.update(kwargs)
    sgd = gf.SGD(**_group(args, ("lr", "batch_size", "optimizer", "num_sequences")))
    saveat = gf.SaveAt(**_group(args, ("ts",)))
    return gf.train_sgd(
        args.pop("source"), sgd=sgd, saveat=saveat, run=gf.Run(progress=False), **args
    )


# A small deep linear network and its modified flow, built here (building
# them runs JAX), not inside the counted calls.
LIN3 = gf.problems.DeepLinear(np.eye(3), np.diag([2.0, 1.0, 0.5]), (3,))
MOD3 = gf.modified_loss(LIN3, 0.1)


def _sde(**kwargs):
    """`gf.sgd_sde` of a small deep linear network, `kwargs` overriding."""
    problem = kwargs.pop("problem", LIN3)
    args = dict(init_scale=0.1, seeds=[0], t1=1.0, sgd=gf.SGD(0.1, 4))
    args.update(kwargs)
    return gf.sgd_sde(problem, run=gf.Run(progress=False), **args)


def _never(t, p, c):
    return 0.0


@contextlib.contextmanager
def _missing(module: str):
    """`import module` fails inside (an encoder that is not installed)."""
    saved = sys.modules.get(module)
    sys.modules[module] = None  # type: ignore[assignment]
    try:
        yield
    finally:
        if saved is None:
            del sys.modules[module]
        else:
            sys.modules[module] = saved


def _foreign_netcdf(path) -> None:
    """A netCDF file that no gradflow result wrote."""
    import xarray

    xarray.Dataset({"x": ("a", np.array([1.0, 2.0]))}).to_netcdf(path)


def _animate_without(module: str, f):
    with _missing(module):
        return plot.animate(f.traj, f.folder / "run.mp4")


def make_files(folder) -> types.SimpleNamespace:
    """Writes the files the load and text cases read into `folder`: a real saved
    trajectory and SGD run, and broken or foreign variants of them.

    The trajectory is a real solved one, read from a file of the first
    format (`tests/data/trajectory_v0.1.0.npz`, written by gradflow 0.1.0) and
    saved again in today's format: no solve to compile, only the file matters;
    the SGD-run file is written by `SGDRun.save` from that trajectory's arrays
    (its contents do not matter, only that it is a genuine SGD-run file)."""
    folder = Path(folder)
    traj = gf.load(Path(__file__).parent / "data" / "trajectory_v0.1.0.npz")
    good = traj.save(folder / "trajectory.npz")
    raw = good.read_bytes()
    f = types.SimpleNamespace(folder=folder, good=good, traj=gf.load(good))
    # valid problems for the theory's cases (building one runs JAX operations,
    # which compile; the check is that the theory function raises first)
    f.deep_linear = gf.problems.DeepLinear(EYE2, EYE2, (2,))
    f.deep_linear_xx = gf.problems.DeepLinear(np.diag([1.0, 2.0]), EYE2, (2,))
    f.committee_anisotropic = gf.problems.Committee(np.diag([1.0, 2.0]), students=2)
    f.in_context = gf.problems.InContextRegression([1.0, 0.5], context=4, heads=2,
                                                   key_dim=1)  # fmt: skip
    merged = gf.problems.InContextRegression([1.0, 0.5], context=4, heads=2)
    zero = merged.init(jax.random.key(0), 0.0)
    f.in_context_traj = gf.Trajectory(
        ts=np.zeros(1),
        loss=np.zeros(1),
        grad_norm=np.zeros(1),
        params=jax.tree.map(lambda x: np.asarray(x)[None], zero),
        problem=merged,
        settings=gf.FlowSettings(),
        stats=gf.FlowStats(),
    )  # fmt: skip (one save, no solve)
    f.truncated = folder / "truncated.npz"
    f.truncated.write_bytes(raw[: len(raw) // 2])
    f.foreign = folder / "foreign.npz"
    np.savez(f.foreign, weights=np.zeros(3), bias=np.ones(2))
    f.text_npz = folder / "notes.npz"
    f.text_npz.write_text("these are my notes, not arrays\n")
    f.empty_npz = folder / "empty.npz"
    f.empty_npz.write_bytes(b"")
    f.missing = folder / "missing.npz"

    with np.load(good, allow_pickle=False) as npz:
        arrays = {k: npz[k] for k in npz.files}
    meta = json.loads(str(arrays["__gradflow__"]))
    # the format version this gradflow writes (and reads up to)
    f.format_version = meta["format_version"]

    def rewrite(name, **changes):
        new_meta = {**meta, **changes}
        for key in [k for k, v in changes.items() if v is None]:
            del new_meta[key]
        path = folder / name
        np.savez(path, **{**arrays, "__gradflow__": np.array(json.dumps(new_meta))})
        return path

    f.newer = rewrite(
        "newer.npz", format_version=f.format_version + 1, gradflow_version="99.0.0"
    )
    f.incomplete = rewrite("incomplete.npz", settings=None)
    f.foreign_nc = folder / "foreign.nc"
    _foreign_netcdf(f.foreign_nc)
    # a run with one save (NumPy slices: nothing compiled)
    f.one_save = gf.Trajectory(
        ts=traj.ts[:1], loss=traj.loss[:1], grad_norm=traj.grad_norm[:1],
        params=jax.tree.map(lambda x: np.asarray(x)[:1], traj.params),
        problem=traj.problem, settings=traj.settings, stats=traj.stats,
    )  # fmt: skip

    run = gf.SGDRun(
        ts=traj.ts,
        steps=np.arange(len(traj)),
        population_loss=traj.loss,
        grad_norm=traj.grad_norm,
        train_loss=traj.loss,
        params=traj.params,
        problem=traj.problem,
        settings=gf.SGDSettings(),
        stats=gf.SGDStats(),
    )
    f.sgd = run.save(folder / "sgd_run.npz")

    f.missing_txt = folder / "no_such_corpus.txt"
    f.empty_txt = folder / "empty.txt"
    f.empty_txt.write_text("  \n")
    f.latin1_txt = folder / "latin1.txt"
    f.latin1_txt.write_bytes("caf\xe9 au lait".encode("latin-1"))
    f.small_txt = folder / "small.txt"
    f.small_txt.write_text("the cat sat on the mat and the dog sat on the cat")
    f.empty_dir = folder / "empty_dir"
    f.empty_dir.mkdir()
    f.zero_txt = folder / "zero.txt"
    f.zero_txt.write_bytes(b"")
    f.binary_txt = folder / "image.txt"
    f.binary_txt.write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR")
    f.no_text_dir = folder / "no_text_dir"
    f.no_text_dir.mkdir()
    (f.no_text_dir / "weights.npy").write_bytes(b"\x93NUMPY")
    (f.no_text_dir / "empty.txt").write_bytes(b"")
    f.stream = gf.text.encode(f.small_txt, vocab_size=3)
    return f


CASES = [
    # ------------------------------------------------------------ MarkovChain
    Case(
        "chain-nan",
        lambda f: gf.MarkovChain([[np.nan, 1.0], [0.5, 0.5]]),
        ValueError,
        r"transition matrix P has a non-finite entry: P\[0, 0\] = nan",
    ),
    Case(
        "chain-inf",
        lambda f: gf.MarkovChain([[0.5, 0.5], [np.inf, 0.5]]),
        ValueError,
        r"transition matrix P has a non-finite entry: P\[1, 0\] = inf",
    ),
    Case(
        "chain-negative",
        lambda f: gf.MarkovChain([[-0.25, 1.25], [0.5, 0.5]]),
        ValueError,
        r"transition matrix P has a negative entry: P\[0, 0\] = -0\.25",
    ),
    Case(
        "chain-row-sum",
        lambda f: gf.MarkovChain([[0.5, 0.5], [0.25, 0.5]]),
        ValueError,
        r"row 1 of transition matrix P sums to 0\.75, not 1",
    ),
    Case(
        "chain-not-square",
        lambda f: gf.MarkovChain(np.full((2, 3), 1 / 3)),
        ValueError,
        r"transition matrix P must be square, got shape \(2, 3\)",
    ),
    Case(
        "chain-d-1",
        lambda f: gf.MarkovChain([[1.0]]),
        ValueError,
        r"need at least d = 2 tokens, got d = 1",
    ),
    Case(
        "chain-3d",
        lambda f: gf.MarkovChain(np.full((2, 2, 2), 0.5)),
        ValueError,
        r"transition matrix P must be 2-dimensional, got shape \(2, 2, 2\)",
    ),
    Case(
        "chain-empty",
        lambda f: gf.MarkovChain([]),
        ValueError,
        r"transition matrix P is empty \(shape \(0,\)\)",
    ),
    Case(
        "chain-strings",
        lambda f: gf.MarkovChain([["a", "b"], ["c", "d"]]),
        TypeError,
        r"transition matrix P must hold real numbers, got an array of dtype <U1",
    ),
    Case(
        "chain-objects",
        lambda f: gf.MarkovChain(np.array([[0.5, None], [0.5, 0.5]], dtype=object)),
        TypeError,
        r"transition matrix P must hold real numbers, got an array of dtype object",
    ),
    Case(
        "chain-none",
        lambda f: gf.MarkovChain(None),
        TypeError,
        r"transition matrix P must be a d x d array of probabilities, got None",
    ),
    Case(
        "chain-ragged",
        lambda f: gf.MarkovChain([[1.0], [0.5, 0.5]]),
        ValueError,
        r"transition matrix P could not be read as an array: .*inhomogeneous",
    ),
    Case(
        "chain-complex",
        lambda f: gf.MarkovChain(np.eye(2, dtype=complex)),
        TypeError,
        r"transition matrix P must be real, got a complex array",
    ),
    Case(
        "chain-booleans",
        lambda f: gf.MarkovChain([[True, False], [False, True]]),
        TypeError,
        r"transition matrix P must hold probabilities, got booleans",
    ),
    Case(
        "chain-reducible",
        lambda f: gf.MarkovChain([[0.5, 0.5, 0.0], [0.5, 0.5, 0.0], [0.0, 0.0, 1.0]]),
        ValueError,
        r"transition matrix P is reducible .*: 2 communicating classes: "
        r"\{0, 1\}; \{2\}",
    ),
    Case(
        "chain-periodic",
        lambda f: gf.MarkovChain([[0.0, 1.0], [1.0, 0.0]]),
        ValueError,
        r"transition matrix P is periodic with period 2",
    ),
    Case(
        "chain-tokens-count",
        lambda f: gf.MarkovChain(P2, tokens=["a", "b", "c"]),
        ValueError,
        r"got 3 token labels for a chain of d = 2 tokens",
    ),
    Case(
        "chain-tokens-duplicate",
        lambda f: gf.MarkovChain(P2, tokens=["x", "x"]),
        ValueError,
        r"tokens must be distinct, but 'x' labels both token 0 and token 1",
    ),
    Case(
        "chain-tokens-string",
        lambda f: gf.MarkovChain(P2, tokens="ab"),
        TypeError,
        r"tokens must be a sequence of strings, got one string 'ab'",
    ),
    Case(
        "chain-pi-not-stationary",
        lambda f: gf.MarkovChain(P2, pi=[0.5, 0.5]),
        ValueError,
        r"pi is not the stationary distribution of P: sum\(pi\) = 1\.0, "
        r"max \|pi P - pi\| = 0\.2",
    ),
    Case(
        "chain-pi-shape",
        lambda f: gf.MarkovChain(P2, pi=[0.5, 0.25, 0.25]),
        ValueError,
        r"pi must have shape \(2,\), got \(3,\)",
    ),
    Case(
        "chain-atol",
        lambda f: gf.MarkovChain(P2, atol=-1.0),
        ValueError,
        r"atol must be a finite number >= 0, got atol = -1\.0",
    ),
    # --------------------------------------------------------------- families
    Case(
        "sticky-d",
        lambda f: gf.chains.sticky(1),
        ValueError,
        r"d must be at least 2, got d = 1",
    ),
    Case(
        "sticky-d-float",
        lambda f: gf.chains.sticky(6.0),
        TypeError,
        r"d must be an integer, got d = 6\.0",
    ),
    Case(
        "sticky-top-mass",
        lambda f: gf.chains.sticky(6, top_mass=1.5),
        ValueError,
        r"top_mass must lie in \(0, 1\), got top_mass = 1\.5",
    ),
    Case(
        "sticky-rho",
        lambda f: gf.chains.sticky(6, rho=1.0),
        ValueError,
        r"rho must lie in \[0, 1\), got rho = 1\.0",
    ),
    Case(
        "sticky-delta-string",
        lambda f: gf.chains.sticky(6, delta="small"),
        TypeError,
        r"delta must be a number, got delta = 'small'",
    ),
    Case(
        "zipf-exponent",
        lambda f: gf.chains.zipf(8, exponent=-1.0),
        ValueError,
        r"exponent must be finite and >= 0, got -1\.0",
    ),
    Case(
        "random-concentration",
        lambda f: gf.chains.random(8, concentration=0.0),
        ValueError,
        r"concentration must be > 0, got 0\.0",
    ),
    Case(
        "random-exponent-nan",
        lambda f: gf.chains.random(8, exponent=float("nan")),
        ValueError,
        r"exponent must be finite and >= 0, got nan",
    ),
    Case(
        "random-seed",
        lambda f: gf.chains.random(8, seed=-1),
        ValueError,
        r"seed must be >= 0 \(a NumPy seed\), got seed = -1",
    ),
    Case(
        "sticky_pi-d",
        lambda f: gf.chains.sticky_pi(1, 0.5, 0.0),
        ValueError,
        r"d must be at least 2, got d = 1",
    ),
    Case(
        "from_pi-string",
        lambda f: gf.chains.from_pi("skewed", 0.5),
        TypeError,
        r"pi must be a 1-D sequence of probabilities, got pi = 'skewed'",
    ),
    Case(
        "from_pi-shape",
        lambda f: gf.chains.from_pi([[0.5, 0.5]], 0.5),
        ValueError,
        r"pi must be 1-D with at least 2 entries, got shape \(1, 2\)",
    ),
    Case(
        "from_pi-zero",
        lambda f: gf.chains.from_pi([0.7, 0.3, 0.0], 0.5),
        ValueError,
        r"pi must be finite and > 0 everywhere, got pi\[2\] = 0\.0",
    ),
    Case(
        "from_pi-sum",
        lambda f: gf.chains.from_pi([0.7, 0.2, 0.2], 0.5),
        ValueError,
        r"pi must sum to 1, got sum\(pi\) = 1\.1",
    ),
    Case(
        "from_pi-lam",
        lambda f: gf.chains.from_pi([0.7, 0.3], lam=1.0),
        ValueError,
        r"lam must lie in \[0, 1\), got lam = 1\.0",
    ),
    Case(
        "from_pi-lam-string",
        lambda f: gf.chains.from_pi([0.7, 0.3], lam="half"),
        TypeError,
        r"lam must be a number, got lam = 'half'",
    ),
    # --------------------------------------------------- init_params, Params
    Case(
        "init_params-width",
        lambda f: gf.init_params(6, width=0),
        ValueError,
        r"width must be an integer >= 1, got width = 0",
    ),
    Case(
        "init_params-seed",
        lambda f: gf.init_params(6, 4, 1e-3, seed=1.5),
        TypeError,
        r"seed must be an integer, got seed = 1\.5",
    ),
    Case(
        "Params-shapes",
        lambda f: gf.Params(
            np.zeros((2, 3)), np.zeros((3, 3)), np.zeros((2, 2)), np.zeros((2, 2))
        ),
        ValueError,
        r"Params\.W1 has shape \(3, 3\) but W0 has shape \(2, 3\) "
        r"\(m = 2, d = 3\), so W1 must end in \(3, 2\)",
    ),
    # -------------------------------------------------------------- integrate
    Case(
        "integrate-no-start",
        lambda f: _integrate(init_scale=None),
        ValueError,
        r"give exactly one of init_scale \(random start\) and params \(given start\), "
        r"got init_scale=None and params=None",
    ),
    Case(
        "integrate-both-starts",
        lambda f: _integrate(init_scale=1e-3, params=P0),
        ValueError,
        r"give exactly one of init_scale .* got init_scale=0\.001 and params=\.\.\.",
    ),
    Case(
        "integrate-init-scale-zero",
        lambda f: _integrate(init_scale=0.0),
        ValueError,
        r"init_scale must be finite and > 0, got 0\.0",
    ),
    Case(
        "integrate-init-scale-negative",
        lambda f: _integrate(init_scale=-1e-3),
        ValueError,
        r"init_scale must be finite and > 0, got -0\.001",
    ),
    Case(
        "integrate-init-scale-nan",
        lambda f: _integrate(init_scale=float("nan")),
        ValueError,
        r"init_scale must be finite and > 0, got nan",
    ),
    Case(
        "integrate-init-scale-inf",
        lambda f: _integrate(init_scale=float("inf")),
        ValueError,
        r"init_scale must be finite and > 0, got inf",
    ),
    Case(
        "integrate-init-scale-string",
        lambda f: _integrate(init_scale="1e-3"),
        TypeError,
        r"init_scale must be a positive number, got '1e-3'",
    ),
    Case(
        "integrate-params-as-init-scale",
        lambda f: gf.integrate(S3, P0, run=gf.Run(progress=False)),
        TypeError,
        r"init_scale must be a positive number, got a Params \(a starting point\?\); "
        r"pass a starting point as params=\.\.\.",
    ),
    Case(
        "integrate-width-zero",
        lambda f: _integrate(width=0),
        ValueError,
        r"width must be >= 1, got width = 0",
    ),
    Case(
        "integrate-width-float",
        lambda f: _integrate(width=2.5),
        TypeError,
        r"width must be an integer, got 2\.5",
    ),
    Case(
        "integrate-t1-zero",
        lambda f: _integrate(t1=0.0),
        ValueError,
        r"t1 must be finite and > 0, got t1 = 0\.0",
    ),
    Case(
        "integrate-t1-negative",
        lambda f: _integrate(t1=-5.0),
        ValueError,
        r"t1 must be finite and > 0, got t1 = -5\.0",
    ),
    Case(
        "integrate-t1-nan",
        lambda f: _integrate(t1=float("nan")),
        ValueError,
        r"t1 must be finite and > 0, got t1 = nan",
    ),
    Case(
        "integrate-t1-inf",
        lambda f: _integrate(t1=float("inf")),
        ValueError,
        r"t1 must be finite and > 0, got t1 = inf",
    ),
    Case(
        "integrate-ts-not-increasing",
        lambda f: _integrate(ts=[0.0, 2.0, 1.0]),
        ValueError,
        r"ts must be strictly increasing, but ts\[1\] = 2\.0 and ts\[2\] = 1\.0",
    ),
    Case(
        "integrate-ts-outside",
        lambda f: _integrate(t1=10.0, ts=[0.0, 5.0, 12.0]),
        ValueError,
        r"ts must lie in \[0, t1\] = \[0, 10\.0\], got values from 0\.0 to 12\.0",
    ),
    Case(
        "integrate-ts-nan",
        lambda f: _integrate(ts=[0.0, np.nan]),
        ValueError,
        r"ts must be finite, got nan",
    ),
    Case(
        "integrate-params-wrong-d",
        lambda f: _integrate(init_scale=None, params=_params(4)),
        ValueError,
        r"params are for d = 4 tokens \(W0 has shape \(2, 4\)\) but the chain has "
        r"d = 3",
    ),
    Case(
        "integrate-params-non-finite",
        lambda f: _integrate(init_scale=None, params=P0_NAN),
        ValueError,
        r"params\.W0 has a non-finite entry at \(0, 1\): nan",
    ),
    Case(
        "integrate-params-batched",
        lambda f: _integrate(init_scale=None, params=P0_BATCHED),
        ValueError,
        r"params\.W0 must be 2-dimensional \(one point, no time axis\), got shape "
        r"\(1, 2, 3\)",
    ),
    Case(
        "integrate-params-tuple",
        lambda f: _integrate(init_scale=None, params=(P0.W0, P0.W1, P0.WQ, P0.WK)),
        TypeError,
        r"params must be a gradflow\.Params or gradflow\.VariantParams, got tuple",
    ),
    Case(
        "population-loss-block-zero",
        lambda f: gf.population_loss(_params(3), S3, block=0),
        ValueError,
        r"block must be an integer >= 1 or 'dense', got block = 0",
    ),
    Case(
        "population-loss-block-unknown",
        lambda f: gf.population_loss(_params(3), S3, block="auto"),
        ValueError,
        r"block must be an integer >= 1 or 'dense', got block = 'auto'",
    ),
    Case(
        "population-loss-block-variant",
        lambda f: gf.population_loss(
            gf.VariantParams(
                np.full((2, 3), 1e-2),
                np.full((3, 2), 1e-2),
                np.zeros((1, 2, 2, 2)),
                np.zeros((1, 2, 2, 2)),
                model=gf.Model(heads=2),
            ),
            S3,
            block=4,
        ),  # fmt: skip
        ValueError,
        r"block is for the paper's model \(gradflow\.Params\), got block = 4 with "
        r"VariantParams of Model\(heads=2",
    ),
    Case(
        "solver-refresh-unknown",
        lambda f: gf.solvers.ROS34PW2(refresh="often"),
        ValueError,
        r"refresh must be one of \('auto', 'residual', 'growth'\), got 'often'",
    ),
    Case(
        "solver-max-rank-below-rank",
        lambda f: gf.solvers.ROS34PW2(rank=16, max_rank=8),
        ValueError,
        r"max_rank must be None, 'auto' or an integer >= rank \(with an integer "
        r"rank\), got max_rank = 8 with rank = 16",
    ),
    Case(
        "solver-max-rank-carry-basis",
        lambda f: gf.solvers.ROS34PW2(max_rank=32, carry_basis=True),
        ValueError,
        r"max_rank \(an adaptive rank\) does not work with carry_basis; give one of "
        r"them, got max_rank = 32, carry_basis = True",
    ),
    Case(
        "integrate-solver-unknown",
        lambda f: _integrate(solver="rk4"),
        ValueError,
        r"unknown solver 'rk4'; choose one of \[.*'dopri5'.*'ros34pw2'.*\]",
    ),
    Case(
        "integrate-rtol-zero",
        lambda f: _integrate(rtol=0.0),
        ValueError,
        r"rtol must be finite and > 0, got rtol = 0\.0",
    ),
    Case(
        "integrate-rtol-nan",
        lambda f: _integrate(rtol=float("nan")),
        ValueError,
        r"rtol must be finite and > 0, got rtol = nan",
    ),
    Case(
        "integrate-rtol-one",
        lambda f: _integrate(rtol=1.0),
        ValueError,
        r"rtol must be < 1, got rtol = 1\.0",
    ),
    Case(
        "integrate-atol-negative",
        lambda f: _integrate(atol=-1e-9),
        ValueError,
        r"atol must be finite and > 0, got atol = -1e-09",
    ),
    Case(
        "integrate-max-steps-zero",
        lambda f: _integrate(max_steps=0),
        ValueError,
        r"max_steps must be >= 1, got max_steps = 0",
    ),
    Case(
        "integrate-max-steps-float",
        lambda f: _integrate(max_steps=1e6),
        TypeError,
        r"max_steps must be an integer, got 1000000\.0",
    ),
    Case(
        "integrate-dtype",
        lambda f: _integrate(dtype="float16"),
        ValueError,
        r"dtype must be 'float64' or 'float32', got 'float16'",
    ),
    Case(
        "integrate-chain-array",
        lambda f: gf.integrate(P2, 1e-3),
        TypeError,
        r"chain must be a gradflow\.MarkovChain, got ndarray; wrap a transition "
        r"matrix as gf\.MarkovChain\(P\)",
    ),
    Case(
        "integrate-seed",
        lambda f: _integrate(seed=0.5),
        TypeError,
        r"seed must be an integer, got seed = 0\.5",
    ),
    Case(
        "integrate-events-type",
        lambda f: _integrate(init_scale=None, params=P0, events=[3]),
        TypeError,
        r"events must be gradflow\.Event objects, got int",
    ),
    Case(
        "integrate-events-duplicate",
        lambda f: _integrate(
            init_scale=None, params=P0, events=[gf.Event("saddle_entry", _never)]
        ),
        ValueError,
        r"event name 'saddle_entry' is used twice \(or is a built-in name\)",
    ),
    Case(
        "integrate-callbacks",
        lambda f: _integrate(init_scale=None, params=P0, callbacks=["print"]),
        TypeError,
        r"callbacks must be callables, got str",
    ),
    Case(
        "integrate-thresholds",
        lambda f: _integrate(init_scale=None, params=P0, thresholds={"escape": 1}),
        TypeError,
        r"thresholds must be a gradflow\.StageThresholds, got dict",
    ),
    Case(
        "integrate_stages-stages-false",
        lambda f: gf.markov.integrate_stages(S3, 1e-3, saveat=gf.SaveAt(stages=False)),
        ValueError,
        r"integrate_stages always locates stages; use gf\.integrate\(\.\.\., "
        r"saveat=gf\.SaveAt\(stages=False\)\)",
    ),
    # -------------------------------------------------------------- train_sgd
    Case(
        "sgd-no-start",
        lambda f: _sgd(init_scale=None),
        ValueError,
        r"give exactly one of init_scale \(random start\) and params",
    ),
    Case(
        "sgd-lr-zero",
        lambda f: _sgd(lr=0.0),
        ValueError,
        r"lr must be finite and > 0, got lr = 0\.0",
    ),
    Case(
        "sgd-lr-negative",
        lambda f: _sgd(lr=-0.1),
        ValueError,
        r"lr must be finite and > 0, got lr = -0\.1",
    ),
    Case(
        "sgd-batch-size",
        lambda f: _sgd(batch_size=0),
        ValueError,
        r"batch_size must be >= 1, got batch_size = 0",
    ),
    Case(
        "sgd-context",
        lambda f: _sgd(context=0),
        ValueError,
        r"context must be >= 1, got context = 0",
    ),
    Case(
        "sgd-optimizer",
        lambda f: _sgd(optimizer="adam"),
        TypeError,
        r"optimizer must be an optax\.GradientTransformation, got str",
    ),
    Case(
        "sgd-num-sequences",
        lambda f: _sgd(num_sequences=4, batch_size=8),
        ValueError,
        r"num_sequences = 4 is smaller than batch_size = 8",
    ),
    Case(
        "sgd-t1-below-lr",
        lambda f: _sgd(t1=0.05, lr=0.1),
        ValueError,
        r"t1 = 0\.05 is shorter than one step of lr = 0\.1",
    ),
    Case(
        "sgd-t1-nan",
        lambda f: _sgd(t1=float("nan")),
        ValueError,
        r"t1 must be finite and > 0, got t1 = nan",
    ),
    Case(
        "sgd-ts-not-increasing",
        lambda f: _sgd(ts=[0.0, 0.8, 0.4]),
        ValueError,
        r"ts must be strictly increasing, but ts\[1\] = 0\.8 and ts\[2\] = 0\.4",
    ),
    Case(
        "sgd-ts-outside",
        lambda f: _sgd(ts=[0.0, 2.0]),
        ValueError,
        r"ts must lie in \[0, t1\] = \[0, 1\.0\], got values from 0\.0 to 2\.0",
    ),
    Case(
        "sgd-source-missing",
        lambda f: _sgd(source=None),
        TypeError,
        r"expected a gradflow\.Problem \(or an object that describes one, such as a "
        r"gradflow\.MarkovChain\), got NoneType with options \['context', 'width'\]",
    ),
    Case(
        "sgd-corpus-too-short",
        lambda f: _sgd(source=f.stream, context=32),
        ValueError,
        r"the corpus has 13 tokens, too few for windows of context \+ 1 = 33 tokens",
    ),
    Case(
        "sgd-seed",
        lambda f: _sgd(seed="0"),
        TypeError,
        r"seed must be an integer, got seed = '0'",
    ),
    # ---------------------------------------------------- text.load, from_text
    Case(
        "text.load-missing",
        lambda f: gf.text.load(f.missing_txt),
        FileNotFoundError,
        r"path: no such file or folder: '.*no_such_corpus\.txt'",
    ),
    Case(
        "text.load-zero-bytes",
        lambda f: gf.text.load(f.zero_txt),
        ValueError,
        r"path: the file '.*zero\.txt' is empty \(0 bytes\)",
    ),
    Case(
        "text.load-binary",
        lambda f: gf.text.load(f.binary_txt),
        ValueError,
        r"path: '.*image\.txt' is a binary file, not text \(a NUL byte at offset 8\)",
    ),
    Case(
        "text.load-folder-without-text",
        lambda f: gf.text.load(f.no_text_dir),
        ValueError,
        r"path: folder '.*no_text_dir' holds no text files \(looked for non-empty "
        r"files ending in \.txt",
    ),
    Case(
        "text.load-nul-path",
        lambda f: gf.text.load(str(f.small_txt) + "\x00"),
        ValueError,
        r"path holds a NUL byte \(at character \d+\), so it is neither a path",
    ),
    Case(
        "text.load-empty-file",
        lambda f: gf.text.load(f.empty_txt),
        ValueError,
        r"the corpus from .*empty\.txt is too small: 0 word tokens, need at least 2",
    ),
    Case(
        "text.load-not-utf8",
        lambda f: gf.text.load(f.latin1_txt),
        ValueError,
        r"path: '.*latin1\.txt' is not UTF-8 text: byte 0xe9 at offset 3",
    ),
    Case(
        "text.load-empty-folder",
        lambda f: gf.text.load(f.empty_dir),
        ValueError,
        r"path: folder '.*empty_dir' holds no text files",
    ),
    Case(
        "text.load-empty-path",
        lambda f: gf.text.load(""),
        ValueError,
        r"path is an empty string \(''\); pass None for the built-in corpus",
    ),
    Case(
        "text.load-level",
        lambda f: gf.text.load(f.small_txt, level="byte"),
        ValueError,
        r"level must be one of \('word', 'char', 'bpe'\), got level = 'byte'",
    ),
    Case(
        "from_text-missing",
        lambda f: gf.chains.from_text(str(f.missing_txt)),
        FileNotFoundError,
        r"path_or_text: no such file or folder: '.*no_such_corpus\.txt'",
    ),
    Case(
        "from_text-nul-text",
        lambda f: gf.chains.from_text("the cat\x00sat on the mat"),
        ValueError,
        r"path_or_text holds a NUL byte \(at character 7\), so it is neither a path "
        r"\(no path can hold one\) nor text",
    ),
    Case(
        "from_text-binary-file",
        lambda f: gf.chains.from_text(str(f.binary_txt)),
        ValueError,
        r"path_or_text: '.*image\.txt' is a binary file, not text",
    ),
    Case(
        "from_text-zero-bytes",
        lambda f: gf.chains.from_text(f.zero_txt),
        ValueError,
        r"path_or_text: the file '.*zero\.txt' is empty \(0 bytes\)",
    ),
    Case(
        "from_text-not-utf8",
        lambda f: gf.chains.from_text(str(f.latin1_txt)),
        ValueError,
        r"path_or_text: '.*latin1\.txt' is not UTF-8 text: byte 0xe9 at offset 3",
    ),
    Case(
        "from_text-folder-without-text",
        lambda f: gf.chains.from_text(str(f.no_text_dir)),
        ValueError,
        r"path_or_text: folder '.*no_text_dir' holds no text files",
    ),
    Case(
        "from_text-long-one-line-text",
        # 460 characters on one line: text (too long to be a file name), not
        # the filesystem's OSError "File name too long".
        lambda f: gf.chains.from_text("the cat sat " * 38 + "here", vocab_size=9),
        ValueError,
        r"vocab_size = 9 is larger than the 4 distinct tokens of the corpus from "
        r"<text>",
    ),
    Case(
        "from_text-empty-text",
        lambda f: gf.chains.from_text(""),
        ValueError,
        r"the corpus from <text> is too small: 0 word tokens, need at least 2",
    ),
    Case(
        "from_text-vocab-size-1",
        lambda f: gf.chains.from_text(f.small_txt, vocab_size=1),
        ValueError,
        r"vocab_size must be >= 2 \(at least one token plus <other>\), got "
        r"vocab_size = 1",
    ),
    Case(
        "from_text-vocab-too-large",
        lambda f: gf.chains.from_text(f.small_txt, vocab_size=50),
        ValueError,
        r"vocab_size = 50 is larger than the 7 distinct tokens of the corpus from "
        r".*small\.txt",
    ),
    Case(
        "from_text-smoothing",
        lambda f: gf.chains.from_text(f.small_txt, vocab_size=3, smoothing=0.0),
        ValueError,
        r"smoothing must be finite and > 0 .*got smoothing = 0\.0",
    ),
    Case(
        "from_text-smoothing-name",
        lambda f: gf.chains.from_text(f.small_txt, vocab_size=3, smoothing="laplace"),
        ValueError,
        r"smoothing must be 'auto' or a number > 0, got smoothing = 'laplace'",
    ),
    Case(
        "from_text-tail",
        lambda f: gf.chains.from_text(f.small_txt, vocab_size=3, tail="keep"),
        ValueError,
        r"tail must be one of \('other', 'drop'\), got tail = 'keep'",
    ),
    # ---------------------------------------------------------- load, load_sgd
    Case(
        "load-missing",
        lambda f: gf.load(f.missing),
        FileNotFoundError,
        r"no such file: '.*missing\.npz'",
    ),
    Case(
        "load-truncated",
        lambda f: gf.load(f.truncated),
        ValueError,
        r"truncated\.npz' could not be read as a gradflow-trajectory file: the \.npz "
        r"archive is damaged or truncated \(\d+ bytes; BadZipFile",
    ),
    Case(
        "load-foreign-npz",
        lambda f: gf.load(f.foreign),
        ValueError,
        r"foreign\.npz' is not a gradflow-trajectory file: it holds no gradflow "
        r"metadata \(arrays bias, weights\); it was not written by gradflow",
    ),
    Case(
        "load-text-file",
        lambda f: gf.load(f.text_npz),
        ValueError,
        r"notes\.npz' is not a gradflow-trajectory file: it is not a NumPy \.npz "
        r"archive \(it starts with b'these ar'\)",
    ),
    Case(
        "load-empty-file",
        lambda f: gf.load(f.empty_npz),
        ValueError,
        r"empty\.npz' is not a gradflow-trajectory file: it is not a NumPy \.npz "
        r"archive \(an empty file\)",
    ),
    Case(
        "load-newer-version",
        lambda f: gf.load(f.newer),
        ValueError,
        # the versions themselves: test_newer_file_names_both_versions
        r"newer\.npz' was written with trajectory format version \d+ by gradflow "
        r"99\.0\.0; this gradflow \(.+\) reads format versions <= \d+: upgrade "
        r"gradflow",
    ),
    Case(
        "load-incomplete",
        lambda f: gf.load(f.incomplete),
        ValueError,
        r"incomplete\.npz' is an incomplete gradflow trajectory: missing 'settings'",
    ),
    Case(
        "load_sweep-sgd-run",
        lambda f: gf.load_sweep(f.sgd),
        ValueError,
        r"sgd_run\.npz' is a 'gradflow-sgd' file, not a 'gradflow-sweep' file; "
        r"read it with gradflow\.load_sgd",
    ),
    Case(
        "load_sgd-trajectory",
        lambda f: gf.load_sgd(f.good),
        ValueError,
        r"trajectory\.npz' is a 'gradflow-trajectory' file, not a 'gradflow-sgd' "
        r"file; read it with gradflow\.load$",
    ),
    Case(
        "load_sgd-missing",
        lambda f: gf.load_sgd(f.missing),
        FileNotFoundError,
        r"no such file: '.*missing\.npz'",
    ),
    Case(
        "load-directory",
        lambda f: gf.load(f.empty_dir),
        ValueError,
        r"empty_dir' is a directory, not a gradflow-trajectory file",
    ),
    Case(
        "load-none",
        lambda f: gf.load(None),
        TypeError,
        r"path must be a str or os\.PathLike, got NoneType",
    ),
    Case(
        "save-problem-lambda",
        lambda f: eqx.tree_at(
            lambda t: t.problem, f.one_save, _Loss(lambda p: jnp.sum(p**2))
        ).save(f.folder / "lambda.npz"),
        TypeError,
        r"_Loss\.fn = function .*<lambda> cannot be saved: a "
        r"problem's fields must be arrays, equinox modules, numbers, strings, "
        r"flags, None, tuples of them, or functions importable by name",
    ),
    # ---------------------------------------------------- animate, report
    Case(
        "report-folder-without-a-result",
        lambda f: plot.report(f.empty_dir),
        FileNotFoundError,
        r"source: '.*empty_dir' holds no gradflow result \(trajectory\.npz, "
        r"sweep\.npz, sgd_run\.npz\); give the folder that gradflow run",
    ),
    Case(
        "animate-unwritable",
        lambda f: plot.animate(f.traj, f.good / "run.gif"),
        ValueError,
        r"path: '.*trajectory\.npz/run\.gif' cannot be written \('.*trajectory\.npz' "
        r"is a file, not a folder\)",
    ),
    Case(
        "animate-suffix",
        lambda f: plot.animate(f.traj, f.folder / "run.avi"),
        ValueError,
        r"path must end in \.mp4 or \.gif, got '.*run\.avi'",
    ),
    Case(
        "animate-one-save",
        lambda f: plot.animate(f.one_save, f.folder / "run.gif"),
        ValueError,
        r"result must be a run with at least 2 saves for animate, got one with 1",
    ),
    Case(
        "animate-no-encoder",
        lambda f: _animate_without("imageio_ffmpeg", f),
        ModuleNotFoundError,
        r"path: '.*run\.mp4': writing an MP4 needs imageio-ffmpeg: pip install "
        r"\"gradflow\[analysis\]\" \(or write a \.gif, with Pillow\)",
    ),
    Case(
        "report-unwritable",
        lambda f: plot.report(f.traj, f.good / "report.html"),
        ValueError,
        r"path: '.*trajectory\.npz/report\.html' cannot be written",
    ),
    Case(
        "report-one-save",
        lambda f: plot.report(f.one_save, f.folder / "report.html"),
        ValueError,
        r"source must be a run with at least 2 saves for report, got one with 1",
    ),
    Case(
        "load-netcdf-foreign",
        lambda f: gf.load(f.foreign_nc),
        ValueError,
        r"foreign\.nc' is not a gradflow result's netCDF file: it holds no "
        r"'gradflow_meta' \(it was not written from a gradflow result's to_xarray\(\)\)",
    ),
    # ------------------------------------------------------- compare, theory
    Case(
        "compare-not-a-run",
        lambda f: gf.compare(f.traj, 3),
        TypeError,
        r"run has no field 'ts': got int",
    ),
    Case(
        "linearize-method",
        lambda f: gf.linearize(S3, P0, method="qr"),
        ValueError,
        r"method must be 'auto', 'dense' or 'lanczos', got 'qr'",
    ),
    Case(
        "linearize-num-modes",
        lambda f: gf.linearize(S3, P0, method="lanczos", num_modes=0),
        ValueError,
        r"num_modes must lie in \[1, 20\], got num_modes = 0",
    ),
    Case(
        "linearize-params-non-finite",
        lambda f: gf.linearize(S3, P0_NAN),
        ValueError,
        r"params\.W0 has a non-finite entry at \(0, 1\): nan",
    ),
    Case(
        "critical_points-not-a-trajectory",
        lambda f: gf.critical_points("trajectory.npz"),
        TypeError,
        r"traj must be a gradflow\.Trajectory, got str",
    ),
    Case(
        "critical_points-method",
        lambda f: gf.critical_points(f.traj, method="qr"),
        ValueError,
        r"method must be 'auto', 'dense' or 'lanczos', got 'qr'",
    ),
    # the problems beyond the paper (`docs/problems.md`)
    Case(
        "DiagonalLinear-parametrisation",
        lambda f: gf.problems.DiagonalLinear(np.ones(2), [1.0, 0.0], "u*v"),
        ValueError,
        r"parametrisation must be 'u2-v2' or 'uv', got parametrisation = 'u\*v'",
    ),
    Case(
        "DiagonalLinear-target-shape",
        lambda f: gf.problems.DiagonalLinear(EYE2, [1.0, 0.0, 2.0]),
        ValueError,
        r"target must be a vector of 2 numbers \(one per row of the covariance\), "
        r"got shape \(3,\)",
    ),
    Case(
        "DiagonalLinear-target-non-finite",
        lambda f: gf.problems.DiagonalLinear(EYE2, [1.0, np.nan]),
        ValueError,
        r"target has a non-finite entry at \(1,\): nan",
    ),
    Case(
        "DiagonalLinear-covariance-variance",
        lambda f: gf.problems.DiagonalLinear([1.0, -2.0], [1.0, 0.0]),
        ValueError,
        r"covariance must have positive variances, got covariance\[1\] = -2",
    ),
    Case(
        "DiagonalLinear-covariance-not-positive-definite",
        lambda f: gf.problems.DiagonalLinear(
            np.array([[1.0, 2.0], [2.0, 1.0]]), [1.0, 0.0]
        ),
        ValueError,
        r"covariance must be positive definite, got smallest eigenvalue -1",
    ),
    Case(
        "DiagonalLinear-noise",
        lambda f: gf.problems.DiagonalLinear(EYE2, [1.0, 0.0], noise=-0.1),
        ValueError,
        r"noise must be finite and >= 0, got noise = -0\.1",
    ),
    Case(
        "saddle_to_saddle-problem",
        lambda f: gf.theory.saddle_to_saddle(f.deep_linear),
        TypeError,
        r"saddle_to_saddle takes a gradflow\.problems\.DiagonalLinear, got DeepLinear",
    ),
    Case(
        "DeepLinear-sigma_xx-not-square",
        lambda f: gf.problems.DeepLinear(np.ones((2, 3)), np.ones((2, 3)), (2,)),
        ValueError,
        r"sigma_xx must be a square matrix, got shape \(2, 3\)",
    ),
    Case(
        "DeepLinear-sigma_xx-asymmetric",
        lambda f: gf.problems.DeepLinear(
            np.array([[1.0, 0.5], [0.2, 1.0]]), EYE2, (2,)
        ),
        ValueError,
        r"sigma_xx must be symmetric, but sigma_xx\[0, 1\] = 0\.5 and "
        r"sigma_xx\[1, 0\] = 0\.2",
    ),
    Case(
        "DeepLinear-sigma_xx-not-positive-definite",
        lambda f: gf.problems.DeepLinear(
            np.array([[1.0, 2.0], [2.0, 1.0]]), EYE2, (2,)
        ),
        ValueError,
        r"sigma_xx must be positive definite, got smallest eigenvalue -1",
    ),
    Case(
        "DeepLinear-sigma_xx-non-finite",
        lambda f: gf.problems.DeepLinear(np.diag([1.0, np.inf]), EYE2, (2,)),
        ValueError,
        r"sigma_xx has a non-finite entry at \(1, 1\): inf",
    ),
    Case(
        "DeepLinear-sigma_yx-shape",
        lambda f: gf.problems.DeepLinear(EYE2, np.ones((3, 4)), (2,)),
        ValueError,
        r"sigma_yx must have shape \(n_out, 2\) \(one column per input, as "
        r"sigma_xx\), got shape \(3, 4\)",
    ),
    Case(
        "DeepLinear-hidden-int",
        lambda f: gf.problems.DeepLinear(EYE2, EYE2, 3),
        TypeError,
        r"hidden must be a tuple of hidden-layer widths, got 3 \(one hidden layer: "
        r"hidden=\(3,\)\)",
    ),
    Case(
        "DeepLinear-hidden-zero",
        lambda f: gf.problems.DeepLinear(EYE2, EYE2, (2, 0)),
        ValueError,
        r"hidden must be a non-empty tuple of integers >= 1, got \(2, 0\)",
    ),
    Case(
        "Committee-teacher-shape",
        lambda f: gf.problems.Committee(np.ones(4), students=2),
        ValueError,
        r"teacher must be an \(M, N\) matrix \(one row per teacher unit\), got "
        r"shape \(4,\)",
    ),
    Case(
        "Committee-teacher-non-finite",
        lambda f: gf.problems.Committee(np.array([[1.0, np.nan]]), students=2),
        ValueError,
        r"teacher has a non-finite entry at \(0, 1\): nan",
    ),
    Case(
        "Committee-students",
        lambda f: gf.problems.Committee(EYE2, students=0),
        ValueError,
        r"students must be >= 1, got students = 0",
    ),
    Case(
        "Committee-activation",
        lambda f: gf.problems.Committee(EYE2, students=2, activation="relu"),
        ValueError,
        r"activation must be one of \('erf',\) \(the activations with a closed-form "
        r"loss\), got 'relu'",
    ),
    Case(
        "InContextRegression-covariance-asymmetric",
        lambda f: gf.problems.InContextRegression(
            np.array([[1.0, 0.5], [0.4, 1.0]]), context=4, heads=2
        ),
        ValueError,
        r"covariance must be symmetric, but covariance\[0, 1\] = 0\.5 and "
        r"covariance\[1, 0\] = 0\.4",
    ),
    Case(
        "InContextRegression-covariance-not-positive-definite",
        lambda f: gf.problems.InContextRegression(
            np.array([[1.0, 2.0], [2.0, 1.0]]), context=4, heads=2
        ),
        ValueError,
        r"covariance must be positive definite, got smallest eigenvalue -1",
    ),
    Case(
        "InContextRegression-covariance-shape",
        lambda f: gf.problems.InContextRegression(np.ones((2, 3)), context=4, heads=2),
        ValueError,
        r"covariance must be a square matrix, got shape \(2, 3\)",
    ),
    Case(
        "InContextRegression-eigenvalue",
        lambda f: gf.problems.InContextRegression([1.0, 0.0], context=4, heads=2),
        ValueError,
        r"covariance must have positive eigenvalues, got covariance\[1\] = 0",
    ),
    Case(
        "InContextRegression-context",
        lambda f: gf.problems.InContextRegression([1.0, 0.5], context=0, heads=2),
        ValueError,
        r"context must be >= 1, got context = 0",
    ),
    Case(
        "InContextRegression-heads",
        lambda f: gf.problems.InContextRegression([1.0, 0.5], context=4, heads=0),
        ValueError,
        r"heads must be >= 1, got heads = 0",
    ),
    Case(
        "InContextRegression-key_dim",
        lambda f: gf.problems.InContextRegression(
            [1.0, 0.5], context=4, heads=2, key_dim=0
        ),
        ValueError,
        r"key_dim must be >= 1, got key_dim = 0",
    ),
    Case(
        "InContextRegression-noise",
        lambda f: gf.problems.InContextRegression(
            [1.0, 0.5], context=4, heads=2, noise=-0.1
        ),
        ValueError,
        r"noise must be finite and >= 0, got noise = -0\.1",
    ),
    Case(
        "in_context_level-learnt",
        lambda f: gf.theory.in_context_level(f.in_context, (0, 2)),
        ValueError,
        r"learnt must be distinct eigen-direction indices in \[0, 2\) \(0 the "
        r"largest eigenvalue\), got learnt = \(0, 2\)",
    ),
    Case(
        "in_context_learning_time-c0",
        lambda f: gf.theory.in_context_learning_time(f.in_context, 10.0),
        ValueError,
        r"c0 must lie below \(fraction / A_j\)\^\(1/3\)",
    ),
    Case(
        "in_context_learnt_times-trajectory",
        lambda f: gf.theory.in_context_learnt_times(f.traj),
        TypeError,
        r"traj must be a trajectory of a gradflow\.problems\.InContextRegression, "
        r"got one of MarkovAttention",
    ),
    Case(
        "in_context_learnt_times-fraction",
        lambda f: gf.theory.in_context_learnt_times(f.in_context_traj, 1.5),
        ValueError,
        r"fraction must lie in \(0, 1\), got fraction = 1\.5",
    ),
    Case(
        "in_context_cubic_rate-direction",
        lambda f: gf.theory.in_context_cubic_rate(f.in_context_traj, 2),
        ValueError,
        r"direction must lie in \[0, 2\), got direction = 2",
    ),
    Case(
        "balanced_start-u0",
        lambda f: gf.theory.balanced_start(f.deep_linear, -1.0),
        ValueError,
        r"u0 must be positive and finite, got -1\.0",
    ),
    Case(
        "deep_linear_saddle-k",
        lambda f: gf.theory.deep_linear_saddle(f.deep_linear, 3),
        ValueError,
        r"k must be an integer in \[0, 2\], got k = 3",
    ),
    Case(
        "deep_linear_saddle_rate-sigma_xx",
        lambda f: gf.theory.deep_linear_saddle_rate(f.deep_linear_xx, 0),
        ValueError,
        r"deep_linear_saddle_rate is derived for sigma_xx = I",
    ),
    Case(
        "committee_plateau-teacher",
        lambda f: gf.theory.committee_plateau(f.committee_anisotropic),
        ValueError,
        r"the closed form is derived for an isotropic teacher \(orthogonal rows of one "
        r"norm, T = tau\^2 I\), got T with diagonal \[1\.0, 4\.0\]",
    ),
    # ------------------------------------------------- reading a result's points
    Case(
        "at-float",
        lambda f: f.traj.at(2.5),
        TypeError,
        r"at takes a save index \(an integer\), got 2\.5; for the point at the time "
        r"t = 2\.5, use traj\.at_time\(2\.5\)",
    ),
    Case(
        "at-out-of-range",
        lambda f: f.traj.at(10**6),
        IndexError,
        r"save index 1000000 is out of range: the result has \d+ saves \(indices 0 "
        r"to \d+, or -\d+ to -1\)",
    ),
    Case(
        "at_time-outside",
        lambda f: f.traj.at_time(-1.0),
        ValueError,
        r"t = -1 lies outside the saved times: \[0, \d+\]",
    ),
    Case(
        "at_time-not-a-number",
        lambda f: f.traj.at_time("1.0"),
        TypeError,
        r"at_time takes a finite time, got '1\.0'",
    ),
    Case(
        "at_time-no-problem",
        lambda f: _without_problem().at_time(0.5),
        ValueError,
        r"t = 0\.5 lies between save 0 \(t = 0\) and save 1 \(t = 1\); "
        r"interpolating needs the flow's velocity, and this trajectory has no problem",
    ),
    Case(
        "critical_points-no-problem",
        lambda f: gf.critical_points(_without_problem()),
        ValueError,
        r"traj has no problem \(gf\.load could not import its class and warned "
        r"which\).*top level of an importable module.*dataclasses\.replace\(traj, "
        r"problem=MyProblem\(\.\.\.\)\)",
    ),
    # ------------------------------------------------------------ motion saves
    Case(
        "SaveAt-motion-1",
        lambda f: gf.SaveAt(motion=2.0),
        ValueError,
        r"motion must be below 1 \(a fraction of the parameters' size between "
        r"saves\), got motion = 2\.0",
    ),
    Case(
        "SaveAt-motion-negative",
        lambda f: gf.SaveAt(motion=-0.1),
        ValueError,
        r"motion must be finite and > 0, got motion = -0\.1",
    ),
    Case(
        "sweep-motion",
        lambda f: gf.sweep(
            [S3], init_scale=1e-3, width=2, saveat=gf.SaveAt(motion=0.01)
        ),
        ValueError,
        r"SaveAt\(motion=0\.01\) is for gradflow\.flow and integrate; "
        r"gradflow\.sweep saves on its grid only",
    ),
    Case(
        "train_sgd-motion",
        lambda f: gf.train_sgd(
            S3, init_scale=1e-2, width=2, context=4, saveat=gf.SaveAt(motion=0.01)
        ),
        ValueError,
        r"SaveAt\(motion=0\.01\) is for gradflow\.flow and integrate; "
        r"gradflow\.train_sgd saves on its grid only",
    ),
    # ------------------------------------- modified flows, full-batch GD, sgd_sde
    Case(
        "modified_loss-lr",
        lambda f: gf.modified_loss(LIN3, 0.0),
        ValueError,
        r"lr must be finite and > 0, got lr = 0\.0",
    ),
    Case(
        "modified_loss-order",
        lambda f: gf.modified_loss(LIN3, 0.1, order=3),
        ValueError,
        r"order must be one of \(0, 1, 2\), got 3",
    ),
    Case(
        "SGD-full-batch-num_sequences",
        lambda f: gf.SGD(0.1, None, num_sequences=8),
        ValueError,
        r"num_sequences = 8 needs a batch_size: batch_size = None is gradient descent",
    ),
    Case(
        "sgd_sde-full-batch",
        lambda f: _sde(sgd=gf.SGD(0.1, None)),
        ValueError,
        r"sgd\.batch_size = None is gradient descent, which has no noise",
    ),
    Case(
        "sgd_sde-optimizer",
        lambda f: _sde(sgd=gf.SGD(0.1, 4, num_sequences=8)),
        ValueError,
        r"gradflow\.sgd_sde models plain online SGD.*num_sequences = 8",
    ),
    Case(
        "sgd_sde-seeds-empty",
        lambda f: _sde(seeds=[]),
        ValueError,
        r"seeds must hold at least one seed, got an empty sequence",
    ),
    Case(
        "sgd_sde-seeds-type",
        lambda f: _sde(seeds=1.5),
        TypeError,
        r"seeds must be a sequence of integers, got 1\.5",
    ),
    Case(
        "sgd_sde-solver-type",
        lambda f: _sde(solver="euler"),
        TypeError,
        r"solver must be a gradflow\.SDESolver, got 'euler'",
    ),
    Case(
        "sgd_sde-t1-short",
        lambda f: _sde(t1=0.01),
        ValueError,
        r"t1 = 0\.01 is shorter than one step of the SDE, dt = 0\.05",
    ),
    Case(
        "sgd_sde-not-sampled",
        lambda f: _sde(problem=MOD3),
        TypeError,
        r"gradflow\.sgd_sde needs a problem that samples .* got ModifiedLoss",
    ),
    Case(
        "SDESolver-samples",
        lambda f: gf.SDESolver(samples=1),
        ValueError,
        r"samples must be >= 2, got samples = 1",
    ),
    Case(
        "SDESolver-order",
        lambda f: gf.SDESolver(order=2),
        ValueError,
        r"order must be 0 or 1, got 2",
    ),
    Case(
        "SDESolver-compensate",
        lambda f: gf.SDESolver(compensate="yes"),
        TypeError,
        r"compensate must be True, False or None, got 'yes'",
    ),
    Case(
        "SDESolver-dt",
        lambda f: gf.SDESolver(dt=0.0),
        ValueError,
        r"dt must be finite and > 0, got dt = 0\.0",
    ),
    Case(
        "StageThresholds-saddle_growth",
        lambda f: gf.StageThresholds(saddle_growth=0.0),
        ValueError,
        r"StageThresholds\.saddle_growth must be finite and > 0, got 0\.0",
    ),
]


def _without_problem() -> gf.Trajectory:
    """A trajectory of three saves whose problem is unknown (as `gf.load`
    returns one whose class it cannot import)."""
    return gf.Trajectory(
        ts=np.array([0.0, 1.0, 2.0]),
        loss=np.array([1.0, 0.5, 0.25]),
        grad_norm=np.ones(3),
        params=np.zeros((3, 2)),
        problem=None,
        settings=gf.FlowSettings(),
        stats=gf.FlowStats(),
    )


class _Loss(gf.Problem):
    """A user's problem whose loss is given as a function of a point `p` (an
    array of 3 numbers): the problems of `START_CASES`."""

    fn: Callable = eqx.field(static=True)

    def loss(self, params):
        return self.fn(params)

    def init(self, key, init_scale):
        return init_scale * np.ones(3)


def _start(loss, p0=1.0):
    return gf.flow(
        _Loss(loss), params=np.full(3, p0), t1=1.0, run=gf.Run(progress=False)
    )


# Bad losses, caught at the start of `gf.flow`: after the arguments passed and
# the loss was evaluated there once (which compiles it), before any solve (its
# first state and chunk) is compiled. Same `(id, call, error, match)` as CASES.
START_CASES = [
    Case(
        "flow-loss-vector",
        lambda f: _start(lambda p: (p - 2.0) ** 2),
        ValueError,
        r"_Loss\.loss must return a scalar \(the population loss\), got shape "
        r"\(3,\) at the starting point; sum or average it to one number",
    ),
    Case(
        "flow-loss-nan",
        lambda f: _start(lambda p: jnp.sum(jnp.log(p - 10.0))),
        ValueError,
        r"_Loss\.loss is not finite at the starting point of _Loss\(\): L = nan; "
        r"the flow needs a finite loss and gradient at the start",
    ),
    Case(
        "flow-gradient-inf",
        lambda f: _start(lambda p: jnp.sum(jnp.sqrt(p)), p0=0.0),
        ValueError,
        r"the gradient of _Loss\.loss is not finite at the starting point of "
        r"_Loss\(\): \|grad L\| = inf \(L = 0\)",
    ),
]


# ------------------------------------------------------------ the command line
# Each case is `(id, argv, match)`: `argv(files)` a bad command line, `match` a
# regex the one line on stderr must hold. Every case exits with status 2 and
# prints one line `gradflow COMMAND: error: ...` naming the flag as typed (not
# the Python argument behind it), before anything is compiled.


class CliCase(NamedTuple):
    id: str
    argv: Callable[[types.SimpleNamespace], list[str]]
    match: str


CLI_CASES = [
    CliCase(
        "theory-problem",
        lambda f: ["theory", "--problem", "mymod:make"],
        r"--problem: gradflow theory reads the problem from a saved run; run "
        r"`gradflow run --problem P --out DIR` first, then `gradflow theory DIR`",
    ),
    CliCase(
        "report-problem",
        lambda f: ["report", str(f.folder), "--problem", "deep-linear"],
        r"--problem: gradflow report reads the problem from a saved run; run "
        r"`gradflow run --problem P --out DIR` first, then `gradflow report DIR`",
    ),
    CliCase(
        "sgd-sde-without-seeds",
        lambda f: ["sgd", "--sde"],
        r"--sde compares an ensemble: add --seeds N",
    ),
    CliCase(
        "sgd-seeds-one",
        lambda f: ["sgd", "--seeds", "1"],
        r"--seeds must be at least 2, got 1",
    ),
    CliCase(
        "run-order-without-lr-correction",
        lambda f: ["run", "--order", "2"],
        r"--order 2 is the order of --lr-correction; add --lr-correction LR",
    ),
    CliCase(
        "run-lr-correction",
        lambda f: ["run", "--lr-correction", "-1"],
        r"--lr-correction must be finite and > 0, got -1",
    ),
    CliCase(
        "run-lr-correction-order",
        lambda f: ["run", "--lr-correction", "0.1", "--order", "3"],
        r"--order must be 0, 1 or 2, got 3",
    ),
    CliCase(
        "sweep-lr-correction",
        lambda f: ["sweep", "--lr-correction", "inf"],
        r"--lr-correction must be finite and > 0, got inf",
    ),
    CliCase(
        "sweep-order-without-lr-correction",
        lambda f: ["sweep", "--order", "0"],
        r"--order 0 is the order of --lr-correction; add --lr-correction LR",
    ),
    CliCase(
        "sweep-lr-correction-order",
        lambda f: ["sweep", "--lr-correction", "0.1", "--order", "-1"],
        r"--order must be 0, 1 or 2, got -1",
    ),
    CliCase(
        "run-text-missing",
        lambda f: ["run", "--text", str(f.folder / "wikitext"), "--vocab-size", "3"],
        r"--text: no such file or folder: '.*wikitext'; give an existing path",
    ),
    CliCase(
        "sgd-text-missing",
        lambda f: ["sgd", "--text", str(f.missing_txt)],
        r"--text: no such file or folder: '.*no_such_corpus.txt'",
    ),
    CliCase(
        "run-text-latin1",
        lambda f: ["run", "--text", str(f.latin1_txt)],
        r"--text: '.*latin1.txt' is not UTF-8 text: byte 0xe9",
    ),
    CliCase(
        "run-vocab-size",
        lambda f: ["run", "--text", str(f.small_txt), "--vocab-size", "64"],
        r"--vocab-size = 64 is larger than the \d+ distinct tokens of the corpus",
    ),
    CliCase(
        "run-init-scale-negative",
        lambda f: ["run", "--init-scale", "-1e-3"],
        r"--init-scale must be finite and > 0, got -0\.001",
    ),
    CliCase(
        "run-width",
        lambda f: ["run", "--width", "0"],
        r"--width must be >= 1, got --width = 0",
    ),
    CliCase(
        "run-d",
        lambda f: ["run", "--d", "1"],
        r"--d must be at least 2, got d = 1",
    ),
    CliCase(
        "run-t1",
        lambda f: ["run", "--t1", "-5"],
        r"--t1 must be finite and > 0, got --t1 = -5\.0",
    ),
    CliCase(
        "run-num-saves",
        lambda f: ["run", "--num-saves", "1"],
        r"--num-saves must be at least 2, got 1",
    ),
    CliCase(
        "run-transition-matrix-missing",
        lambda f: ["run", "--transition-matrix", str(f.folder / "P.npy")],
        r"--transition-matrix: no such file or folder: '.*P.npy'",
    ),
    CliCase(
        "run-transition-matrix-folder",
        lambda f: ["run", "--transition-matrix", str(f.empty_dir)],
        r"--transition-matrix: '.*empty_dir' is a folder, not a \.npy file",
    ),
    CliCase(
        "run-heads",
        lambda f: ["run", "--heads", "two"],
        r"--heads must be an integer >= 1, got 'two'",
    ),
    CliCase(
        "sgd-lr",
        lambda f: ["sgd", "--lr", "-0.5"],
        r"--lr must be finite and > 0, got --lr = -0\.5",
    ),
    CliCase(
        "sgd-batch-size",
        lambda f: ["sgd", "--batch-size", "0"],
        r"--batch-size must be >= 1, got --batch-size = 0",
    ),
    CliCase(
        "sgd-checkpoint-every",
        lambda f: ["sgd", "--checkpoint", "x.npz", "--checkpoint-every", "-1"],
        r"--checkpoint-every must be",
    ),
    CliCase(
        "sweep-delta-range",
        lambda f: ["sweep", "--delta", "0:x:3", "--out", str(f.folder / "sw")],
        r"--delta must be start:stop:num, a comma list or a number, got '0:x:3'",
    ),
    CliCase(
        "sweep-not-a-parameter",
        lambda f: ["sweep", "--chain", "zipf", "--delta", "0.1"],
        r"--delta is not a parameter of zipf",
    ),
    # --- the problem of every subcommand: its options, their values, a factory
    CliCase(
        "run-problem-unknown",
        lambda f: ["run", "--problem", "nonsense"],
        r"--problem must be one of markov, deep-linear, committee, in-context, "
        r"diagonal-linear or "
        r"'package\.module:factory', got 'nonsense'",
    ),
    CliCase(
        "run-option-of-deep-linear",
        lambda f: ["run", "--problem", "committee", "--singular-values", "1", "2"],
        r"--singular-values does not apply to --problem committee \(it is an option "
        r"of deep-linear\)",
    ),
    CliCase(
        "run-option-of-markov",
        lambda f: ["run", "--problem", "deep-linear", "--delta", "0.1"],
        r"--delta does not apply to --problem deep-linear \(it is an option of "
        r"markov\)",
    ),
    CliCase(
        "run-context-is-sgd-only",
        lambda f: ["run", "--context", "8"],
        r"--context does not apply to --problem markov in gradflow run \(it is an "
        r"option of in-context\)",
    ),
    CliCase(
        "run-negative-singular-value",
        lambda f: ["run", "--problem", "deep-linear", "--singular-values", "3", "-1"],
        r"--singular-values must be finite and > 0, got '-1'",
    ),
    CliCase(
        "run-teacher-norm",
        lambda f: ["run", "--problem", "committee", "--teacher-norm", "0"],
        r"--teacher-norm must be finite and > 0, got '0'",
    ),
    CliCase(
        "run-students",
        lambda f: ["run", "--problem", "committee", "--students", "two"],
        r"--students must be an integer >= 1, got 'two'",
    ),
    CliCase(
        "run-teacher-and-teachers",
        lambda f: [
            "run",
            "--problem",
            "committee",
            "--teacher",
            str(f.good),
            "--teachers",
            "2",
        ],  # fmt: skip
        r"--teachers does not apply with --teacher",
    ),
    CliCase(
        "run-animate-frames",
        lambda f: [
            "run",
            "--out",
            str(f.folder / "film"),
            "--animate",
            "--frames",
            "1",
        ],
        r"--frames must be >= 2, got 1",
    ),
    CliCase(
        "run-diagonal-covariance",
        lambda f: [
            "run",
            "--problem",
            "diagonal-linear",
            "--target",
            "1",
            "0",
            "--covariance",
            "1",
            "2",
            "3",
        ],  # fmt: skip
        r"--covariance must be 2 variances or 4 matrix entries \(D = 2, the "
        r"length of --target\), got 3 numbers",
    ),
    CliCase(
        "run-diagonal-parametrisation",
        lambda f: ["run", "--problem", "diagonal-linear", "--parametrisation", "vu"],
        r"--parametrisation must be one of u2-v2, uv, got 'vu'",
    ),
    CliCase(
        "run-key-dim",
        lambda f: ["run", "--problem", "in-context", "--key-dim", "0"],
        r"--key-dim must be an integer >= 1 or 'merged', got '0'",
    ),
    CliCase(
        "run-eigenvalues-and-d",
        lambda f: [
            "run",
            "--problem",
            "in-context",
            "--d",
            "2",
            "--eigenvalues",
            "1",
            "0.5",
            "0.25",
        ],  # fmt: skip
        r"--d must be the number of --eigenvalues \(3\), got 2",
    ),
    CliCase(
        "run-zipf-delta",
        lambda f: ["run", "--chain", "zipf", "--delta", "0.1"],
        r"--delta is not a parameter of zipf",
    ),
    CliCase(
        "run-text-and-chain",
        lambda f: ["run", "--text", "builtin", "--delta", "0.1"],
        r"--delta does not apply with --text",
    ),
    CliCase(
        "run-problem-arg-type",
        lambda f: [
            "run",
            "--problem",
            "gradflow.problems:InContextRegression",
            "--problem-arg",
            "noise=abc",
        ],  # fmt: skip
        r"--problem-arg noise=abc: noise must be a number, got 'abc'",
    ),
    CliCase(
        "run-problem-arg-unknown",
        lambda f: [
            "run",
            "--problem",
            "gradflow.problems:InContextRegression",
            "--problem-arg",
            "nosie=0.1",
        ],  # fmt: skip
        r"--problem-arg nosie: gradflow\.problems:InContextRegression has no "
        r"parameter 'nosie' \(it takes covariance, context, heads, key_dim, noise\)",
    ),
    CliCase(
        "run-problem-arg-missing",
        lambda f: [
            "run",
            "--problem",
            "gradflow.problems:InContextRegression",
            "--problem-arg",
            "context=4",
        ],  # fmt: skip
        r"--problem-arg: gradflow\.problems:InContextRegression needs "
        r"covariance=VALUE, heads=VALUE \(no default\)",
    ),
    CliCase(
        "run-factory-raises",
        lambda f: [
            "run",
            "--problem",
            "gradflow.problems:InContextRegression",
            "--problem-arg",
            "covariance=[1, -1]",
            "--problem-arg",
            "context=4",
            "--problem-arg",
            "heads=1",
        ],  # fmt: skip
        r"--problem: gradflow\.problems:InContextRegression\(\.\.\.\) raised "
        r"ValueError: covariance must have positive eigenvalues",
    ),
    CliCase(
        "run-problem-arg-not-a-factory",
        lambda f: ["run", "--problem", "committee", "--problem-arg", "norm=2"],
        r"--problem-arg does not apply to --problem committee",
    ),
    CliCase(
        "run-out-is-a-file",
        lambda f: ["run", "--out", str(f.good)],
        r"--out: '.*trajectory\.npz' is a file, not a folder",
    ),
    CliCase(
        "run-out-not-empty",
        lambda f: ["run", "--out", str(f.folder)],
        r"--out: '.*' is not empty \(it holds .*\); give --overwrite to replace "
        r"what gradflow wrote there, or another --out",
    ),
    CliCase(
        "sweep-students-range",
        lambda f: ["sweep", "--problem", "committee", "--students", "2:x:3"],
        r"--students must be start:stop:num, a comma list or a number, got '2:x:3'",
    ),
    CliCase(
        "sgd-solver-without-flow",
        lambda f: ["sgd", "--solver", "tsit5"],
        r"--solver applies to the flow of --flow \(SGD has no solver\); add --flow",
    ),
    CliCase(
        "sgd-option-of-committee",
        lambda f: ["sgd", "--problem", "in-context", "--students", "2"],
        r"--students does not apply to --problem in-context \(it is an option of "
        r"committee\)",
    ),
    CliCase(
        "theory-out-is-a-file",
        lambda f: ["theory", str(f.good), "--out", str(f.good)],
        r"--out: '.*trajectory\.npz' is a file, not a folder",
    ),
    CliCase(
        "report-folder-without-a-result",
        lambda f: ["report", str(f.empty_dir)],
        r"RUN_DIR: '.*empty_dir' holds no gradflow result",
    ),
    CliCase(
        "report-unwritable",
        lambda f: ["report", str(f.folder), "--out", str(f.good / "r.html")],
        r"--out: '.*trajectory\.npz/r\.html' cannot be written",
    ),
    CliCase(
        "report-out-exists",
        lambda f: ["report", str(f.folder), "--out", str(f.small_txt)],
        r"--out: '.*small\.txt' exists; give --overwrite to replace it, or another "
        r"--out",
    ),
    CliCase(
        "run-animate-suffix",
        lambda f: ["run", "--animate", "run.avi", "--out", str(f.folder / "r")],
        r"--animate must end in \.mp4 or \.gif, got '.*run\.avi'",
    ),
    CliCase(
        "run-animate-unwritable",
        lambda f: ["run", "--animate", "--out", str(f.good / "r")],
        r"--animate: '.*trajectory\.npz/r/animation\.mp4' cannot be written",
    ),
    CliCase(
        "sgd-netcdf-without-out",
        lambda f: ["sgd", "--netcdf"],
        r"--netcdf needs --out, the folder to write the file in",
    ),
    CliCase(
        "theory-missing",
        lambda f: ["theory", str(f.missing)],
        r"TRAJ\.npz: no such file or folder: '.*missing.npz'",
    ),
    CliCase(
        "theory-foreign",
        lambda f: ["theory", str(f.foreign)],
        r"foreign.npz' .*no gradflow metadata",
    ),
    CliCase(
        "theory-threshold",
        lambda f: ["theory", str(f.good), "--threshold", "-1"],
        r"--threshold must be finite and > 0, got -1\.0",
    ),
]


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    return make_files(tmp_path_factory.mktemp("error_files"))


class _CompileEvents:
    """Records JAX's compilation events (trace, lower, compile) while active."""

    def __enter__(self):
        self.events: list[str] = []
        self.names: list[str] = []  # the compiled functions' names
        jax.monitoring.register_event_duration_secs_listener(self._listen)
        return self

    def _listen(self, event: str, duration: float, **kwargs) -> None:
        if event.startswith(_COMPILE_EVENT_PREFIX):
            self.events.append(event)
            self.names.append(str(kwargs.get("fun_name", "")))

    def __exit__(self, *exc):
        jax.monitoring.unregister_event_duration_listener(self._listen)
        return False


def test_catalogue_is_large_and_distinct():
    ids = [c.id for c in CASES]
    assert len(ids) == len(set(ids))
    assert len(CASES) >= 30


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_bad_input(case, files):
    jax.clear_caches()  # so that any JAX work of the call compiles, and is seen
    with _CompileEvents() as compiled:
        with pytest.raises(Exception) as excinfo:
            case.call(files)
    error = excinfo.value
    message = str(error)
    # the exact type, not a subclass from deep inside NumPy or JAX
    assert type(error) is case.error, f"{type(error).__name__}: {message}"
    assert "\n" not in message, message
    assert excinfo.match(case.match)
    assert compiled.events == [], f"compiled before raising: {compiled.events}"


def test_newer_file_names_both_versions(files):
    # the "load-newer-version" case's numbers: the file's, one above this
    # gradflow's, and the newest this gradflow reads
    with pytest.raises(ValueError) as info:
        gf.load(files.newer)
    assert (
        f"format version {files.format_version + 1} by gradflow 99.0.0; this "
        "gradflow " in str(info.value)
    )
    assert f"reads format versions <= {files.format_version}: " in str(info.value)


def test_start_catalogue_is_distinct():
    ids = [c.id for c in CASES + START_CASES]
    assert len(ids) == len(set(ids))


@pytest.mark.parametrize("case", START_CASES, ids=[c.id for c in START_CASES])
def test_bad_loss_at_the_start(case, files):
    jax.clear_caches()  # so that every compilation of the call is seen
    with _CompileEvents() as compiled:
        with pytest.raises(Exception) as excinfo:
            case.call(files)
    error = excinfo.value
    message = str(error)
    assert type(error) is case.error, f"{type(error).__name__}: {message}"
    assert "\n" not in message, message
    assert excinfo.match(case.match)
    # the loss was evaluated at the start; the solve was never compiled
    names = " ".join(compiled.names)
    assert "_init_state" not in names and "_advance" not in names, names


# The messages of a solve that fails at run time (one per result code) and
# of the descent check: tests/test_solvers.py, with the solving module.


def test_cli_catalogue_is_distinct():
    ids = [c.id for c in CLI_CASES]
    assert len(ids) == len(set(ids)) and len(ids) >= 15


@pytest.mark.parametrize("case", CLI_CASES, ids=[c.id for c in CLI_CASES])
def test_cli_bad_input(case, files, capsys):
    from gradflow.cli import main

    argv = case.argv(files)
    jax.clear_caches()  # so that any JAX work of the call compiles, and is seen
    with _CompileEvents() as compiled:
        code = main(argv)
    err = capsys.readouterr().err
    assert code == 2, err
    assert err.endswith("\n") and err.count("\n") == 1, err
    assert err.startswith(f"gradflow {argv[0]}: error: "), err
    assert re.search(case.match, err), err
    # no Python argument name where a flag was typed
    for name in ("path_or_text", "vocab_size", "init_scale", "batch_size"):
        assert name not in err, err
    assert compiled.events == [], f"compiled before raising: {compiled.events}"
