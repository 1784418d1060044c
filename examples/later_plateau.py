"""Why the flank rate at the reference run's L* = 1.2976 plateau misses the
Hessian's top rate: the flow passes the critical point far from it and
leaves along a slower unstable mode.

    PYTHONPATH=. python examples/later_plateau.py paper.npz

`paper.npz` is the reference run of docs/theory.md (sticky(6, 0.5, 0.5, 0.05),
width 8, init_scale 1e-3, t1 = 20000). For every save on the plateau the
critical point is refined from that save; the closest one is kept. Then the
displacement of the trajectory from it is split over the eigenvalue clusters
of -Hessian (`gradflow.theory.eigen_clusters`), and the growth rate of each
unstable cluster's share is fitted on the saves after the closest approach.
"""

import argparse

import numpy as np

import gradflow as gf
from gradflow import theory


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("traj")
    parser.add_argument("--loss", type=float, default=1.2976)
    args = parser.parse_args()
    tr = gf.load(args.traj)
    ch = tr.problem.chain
    plateau = next(
        (a, b, c)
        for a, b, c in theory.plateaus(tr)
        if abs(float(tr.loss[b]) - args.loss) < 1e-3
    )
    a, best, c = plateau
    print(
        f"plateau: saves {a}..{c} (t = {float(tr.ts[a]):.5g}..{float(tr.ts[c]):.5g}), "
        f"least |grad L| = {float(tr.grad_norm[best]):.3g} at t = {float(tr.ts[best]):.5g}"
    )
    found = []
    for i in range(a, c + 1):
        p, ok = theory.refine_critical_point(ch, tr.params[i])
        dx = np.asarray(theory.flatten_params(tr.params[i])) - np.asarray(
            theory.flatten_params(p)
        )
        lin = gf.linearize(ch, p)
        found.append((float(np.linalg.norm(dx)), i, p, ok, lin))
        print(
            f"  from save {i} (t = {float(tr.ts[i]):.5g}, L = {float(tr.loss[i]):.8f}): "
            f"converged {ok}, L* = {lin.loss:.8f}, distance {np.linalg.norm(dx):.3f}, "
            f"top rate {lin.unstable_rate:.5g}"
        )
    dist, i0, p, ok, lin = min((f for f in found if f[3]), key=lambda f: f[0])
    print(f"closest converged refinement: from save {i0}, distance {dist:.3f}")
    V = np.stack(
        [
            np.asarray(theory.flatten_params(lin.modes[k]))
            for k in range(len(lin.eigenvalues))
        ]
    )
    x = np.stack(
        [np.asarray(theory.flatten_params(tr.params[i])) for i in range(len(tr.ts))]
    )
    X = x - np.asarray(theory.flatten_params(p))
    ts = np.asarray(tr.ts)
    after = np.arange(i0, c + 1)
    print(f"closest save {i0}: loss {float(tr.loss[i0]) - lin.loss:+.2e} from L*")
    for idx in theory.eigen_clusters(lin.eigenvalues)[:5]:
        lam = float(lin.eigenvalues[idx[0]])
        if lam <= lin.tol:
            break
        amp = np.linalg.norm(X @ V[idx].T, axis=1)
        share = amp[i0] ** 2 / np.sum(X[i0] ** 2)
        slope = np.polyfit(ts[after], np.log(amp[after]), 1)[0]
        print(
            f"  unstable cluster {lam:.5g} (x{idx.size}): share of the displacement "
            f"{share:.2e}, fitted growth of its amplitude on saves {i0}..{c} "
            f"(t = {ts[i0]:.5g}..{ts[c]:.5g}): {slope:.5g}"
        )
    fr = theory.flank_rate(tr, best)
    print(
        f"flank rate (report's measurement): {fr['rate']:.5g} on t in "
        f"[{fr['t0']:.5g}, {fr['t1']:.5g}]"
    )


if __name__ == "__main__":
    main()
