"""Snapshots of gradflow's results, written by one checkout and compared by
another: the check that a refactor kept every number.

    python benchmarks/snapshot.py --write DIR      # on the commit before
    python benchmarks/snapshot.py --compare DIR    # on the commit after

Only public names are used, so the same script runs on both sides. Each case
saves its arrays (save times, losses, |grad L|, every parameter, the extras),
its step counts and its stage and event tables; `--compare` reports, per case,
whether the step counts and stage sequences are equal and the largest
relative difference of every array (0 means bit for bit).

Cases: the default scenario of `gradflow run` (stages on and off), a random
chain, a model variant, a float32 solve, a sweep, two SGD runs (fresh
sequences, a fixed dataset) and SGD on text, and the theory report's
critical points of the default scenario; the other built-in problems (a deep
linear network, a soft committee machine) and a problem defined here from
public names only (a quadratic, whose flow has no saddle), each with stages,
a sweep of problems and the critical points of the deep linear network.
"""

import argparse
import json
import sys
from pathlib import Path

import numpy as np


def _params(params) -> dict[str, np.ndarray]:
    import jax

    leaves = jax.tree_util.tree_flatten_with_path(params)[0]
    return {
        "params" + jax.tree_util.keystr(path): np.asarray(leaf) for path, leaf in leaves
    }


def _records(records) -> list[dict]:
    """Records as dicts, without fields that are unset (`None`): a version
    that adds an optional field compares equal where it does not set it."""
    out = []
    for r in records:
        d = r.to_dict() if hasattr(r, "to_dict") else dict(r)
        out.append({k: v for k, v in d.items() if v is not None})
    return out


def _result(r, loss_name: str = "loss") -> tuple[dict, dict]:
    arrays = {
        "ts": np.asarray(r.ts),
        "loss": np.asarray(getattr(r, loss_name)),
        "grad_norm": np.asarray(r.grad_norm),
        **_params(r.params),
        **{f"extra_{k}": np.asarray(v) for k, v in r.extras.items()},
    }
    stats = {
        k: v
        for k, v in r.stats.to_dict().items()
        if k.startswith("num_") and k != "num_devices" or k == "steps_run"
    }
    meta = {
        "stats": stats,
        "ok": bool(r.ok),
        "message": r.message,
        "stages": _records(r.stages),
        "events": _records(r.events),
    }
    return arrays, meta


def cases():
    import gradflow as gf

    sticky = gf.chains.sticky(6, 0.5, 0.5, 0.05)
    quiet = gf.Run(progress=False)
    bare = gf.SaveAt(stages=False)
    kw = dict(width=8, t1=5000.0, run=quiet)
    yield "default", lambda: gf.integrate(sticky, 1e-3, **kw)
    yield "default_bare", lambda: gf.integrate(sticky, 1e-3, saveat=bare, **kw)
    rand = gf.chains.random(6, seed=3)
    yield (
        "random",
        lambda: gf.integrate(rand, 1e-3, width=8, t1=20000.0, run=quiet),
    )
    yield (
        "random_bare",
        lambda: gf.integrate(rand, 1e-3, width=8, t1=20000.0, saveat=bare, run=quiet),
    )
    model = gf.Model(heads=2, value=True, residual=True, norm="rms")
    yield "variant", lambda: gf.integrate(sticky, 1e-3, model=model, **kw)
    yield (
        "variant_bare",
        lambda: gf.integrate(sticky, 1e-3, model=model, saveat=bare, **kw),
    )
    yield (
        "float32",
        lambda: gf.integrate(
            sticky,
            1e-2,
            width=4,
            t1=2000.0,
            solver=gf.Solver(dtype="float32"),
            run=quiet,
        ),  # fmt: skip
    )
    level = float(sticky.unigram_entropy) + 0.01
    below = gf.Event(
        "below_unigram",
        lambda t, p, problem: level - gf.population_loss(p, problem.chain),
        direction=True,
    )
    events = gf.SaveAt(events=[below])
    yield "events", lambda: gf.integrate(sticky, 1e-3, saveat=events, **kw)
    chains = [gf.chains.sticky(4, 0.5, 0.5, x) for x in (0.0, 0.1)]
    yield (
        "sweep",
        lambda: gf.sweep(
            chains, init_scale=1e-3, seeds=[0, 1], width=4, t1=2000.0, run=quiet
        ),
    )
    p0 = gf.init_params(6, 8, 1e-3, seed=1)
    sgd = gf.SGD(lr=0.5, batch_size=64)
    sgd_kw = dict(context=64, sgd=sgd, t1=60.0, run=quiet)
    yield "sgd", lambda: gf.train_sgd(sticky, p0, **sgd_kw)
    data = dict(sgd_kw, sgd=gf.SGD(lr=0.5, batch_size=64, num_sequences=256))
    yield "sgd_dataset", lambda: gf.train_sgd(sticky, p0, **data)
    yield (
        "sgd_variant",
        lambda: gf.train_sgd(
            sticky, init_scale=1e-3, width=8, model=gf.Model(heads=2), **sgd_kw
        ),
    )
    stream = gf.text.encode(vocab_size=8)
    yield (
        "sgd_text",
        lambda: gf.train_sgd(stream, init_scale=1e-3, width=8, seed=2, **sgd_kw),
    )


def problem_cases():
    import equinox as eqx
    import jax
    import jax.numpy as jnp

    import gradflow as gf

    class Quadratic(gf.Problem):
        """1/2 (p - c)^T A (p - c): convex, no saddle."""

        A: jax.Array
        c: jax.Array

        def loss(self, params):
            r = params - self.c
            return 0.5 * r @ self.A @ r

        def init(self, key, init_scale):
            return init_scale * jax.random.normal(key, self.c.shape, self.c.dtype)

    deep = gf.problems.DeepLinear.random(
        [3.0, 1.0, 0.3], n_in=5, n_out=4, hidden=(4,), seed=0
    )
    quiet = gf.Run(progress=False)
    yield "deep_linear", lambda: gf.flow(deep, 1e-3, t1=200.0, run=quiet)
    committee = gf.problems.Committee.isotropic(3, 6, 3, norm=1.0, seed=None)
    yield "committee", lambda: gf.flow(committee, 1e-3, t1=5000.0, run=quiet)
    quad = Quadratic(jnp.diag(jnp.array([1.0, 0.1, 0.01])), jnp.array([1.0, 2, 3]))
    del eqx
    yield "quadratic", lambda: gf.flow(quad, 1e-3, t1=2000.0, run=quiet)
    others = [
        gf.problems.DeepLinear.random(s, n_in=4, n_out=3, hidden=(3,), seed=0)
        for s in ([2.0, 1.0], [2.0, 0.5])
    ]
    yield (
        "sweep_problems",
        lambda: gf.sweep(others, init_scale=1e-3, seeds=[0, 1], t1=100.0, run=quiet),
    )


def deep_theory_case():
    import gradflow as gf

    deep = gf.problems.DeepLinear.random(
        [3.0, 1.0, 0.3], n_in=5, n_out=4, hidden=(4,), seed=0
    )
    traj = gf.flow(deep, 1e-3, t1=200.0, run=gf.Run(progress=False))
    return _points(gf.critical_points(traj))


def _points(points):
    arrays = {}
    meta = {"points": []}
    for i, cp in enumerate(points):
        arrays.update({f"cp{i}/{k}": v for k, v in _params(cp.params).items()})
        arrays[f"cp{i}/eigenvalues"] = np.asarray(cp.linearization.eigenvalues)
        meta["points"].append({"kind": cp.kind, "t": float(cp.t)})
    return arrays, meta


def run_case(name, make):
    import gradflow as gf

    result = make()
    if isinstance(result, gf.Sweep):
        arrays, meta = {"loss": np.asarray(result.loss)}, {"members": []}
        for i, traj in enumerate(result):
            a, m = _result(traj)
            arrays.update({f"m{i}/{k}": v for k, v in a.items()})
            meta["members"].append(m)
        return arrays, meta
    if isinstance(result, gf.SGDRun):
        arrays, meta = _result(result, "population_loss")
        arrays["train_loss"] = np.asarray(result.train_loss)
        arrays["steps"] = np.asarray(result.steps)
        return arrays, meta
    return _result(result)


def theory_case():
    import gradflow as gf

    traj = gf.integrate(
        gf.chains.sticky(6, 0.5, 0.5, 0.05),
        1e-3,
        width=8,
        t1=5000.0,
        run=gf.Run(progress=False),
    )
    return _points(gf.critical_points(traj))


def write(out: Path, only):
    out.mkdir(parents=True, exist_ok=True)
    todo = list(cases()) + list(problem_cases())
    todo += [("theory", theory_case), ("theory_deep_linear", deep_theory_case)]
    for name, make in todo:
        if only and name not in only:
            continue
        if name.startswith("theory"):
            arrays, meta = make()
        else:
            arrays, meta = run_case(name, make)
        np.savez(out / f"{name}.npz", **arrays)
        (out / f"{name}.json").write_text(json.dumps(meta, indent=1, default=float))
        print(f"wrote {name}", flush=True)


def _rel(a, b) -> float:
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    if a.shape != b.shape:
        return float("inf")
    if a.size == 0:
        return 0.0
    both_nan = np.isnan(a) & np.isnan(b)
    diff = np.where(both_nan, 0.0, np.abs(a - b))
    scale = np.maximum(np.abs(b), np.max(np.abs(np.nan_to_num(b))) * 1e-300 + 1e-300)
    return float(np.max(diff / scale))


def compare(ref: Path, only) -> int:
    failed = 0
    tmp = ref.parent / (ref.name + ".now")
    write(tmp, only)
    for path in sorted(ref.glob("*.npz")):
        name = path.stem
        if only and name not in only:
            continue
        old, new = np.load(path), np.load(tmp / path.name)
        old_meta = json.loads((ref / f"{name}.json").read_text())
        new_meta = json.loads((tmp / f"{name}.json").read_text())
        keys = sorted(set(old.files) | set(new.files))
        missing = [k for k in keys if k not in old.files or k not in new.files]
        worst = max(
            (_rel(new[k], old[k]) for k in keys if k not in missing), default=0.0
        )
        same_meta = old_meta == new_meta
        status = "same" if worst == 0 and same_meta and not missing else "DIFFERS"
        if status != "same":
            failed += 1
        print(
            f"{name:14s} {status:8s} max rel diff {worst:.3g}; tables and step counts "
            f"{'equal' if same_meta else 'DIFFER'}"
            + (f"; arrays only on one side: {missing}" if missing else "")
        )
        if not same_meta:
            for k in sorted(set(old_meta) | set(new_meta)):
                if old_meta.get(k) != new_meta.get(k):
                    print(f"    {k}: before {str(old_meta.get(k))[:300]}")
                    print(f"    {k}: after  {str(new_meta.get(k))[:300]}")
    return 1 if failed else 0


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    group = parser.add_mutually_exclusive_group(required=True)
    group.add_argument("--write", type=Path, metavar="DIR")
    group.add_argument("--compare", type=Path, metavar="DIR")
    parser.add_argument("--only", nargs="*", default=None, help="case names")
    args = parser.parse_args()
    if args.write:
        write(args.write, args.only)
        return 0
    return compare(args.compare, args.only)


if __name__ == "__main__":
    sys.exit(main())
