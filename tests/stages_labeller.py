"""An independent labeller of stages, for checking `gradflow.detect_stages`.

A second, offline implementation of the definitions in `docs/stages.md`,
sharing no code with the detector: it recomputes every observable from the
saved parameters in NumPy (`reference.py`'s model, `numpy.linalg.svd`), takes
every rate as a central finite difference in $\\log t$ on a dense save grid
(the detector reads the exact `jax.jvp` rates at the default 400 saves), and
finds crossings by linear interpolation. Thresholds are the documented
defaults, written out here again (not read from `StageThresholds`).

`evaluate_suite` (used by `benchmarks/stages_accuracy.py` and
`tests/test_stages_accuracy.py`) matches detected and labelled stages and
prints precision and recall per stage kind.
"""

import math
from collections import defaultdict

import numpy as np
from reference import loss_and_grad


# The documented defaults (docs/stages.md), written out independently.
ESCAPE, ENTRY = 1e-2, 5e-3
FOCUS_RATE, ENTROPY_DROP, MASS_CHANGE, SHARE = 5e-2, 1e-2, 0.02, 0.8
DIR_RATE, DIR_LOW, DIR_OPEN = 1.0, 0.05, 0.3
WINDOW = 0.03
KINDS = ("condensation", "plateau", "focus", "dilution", "new_direction")


# -- observables, recomputed -------------------------------------------------


def _attention(W0, WQ, WK, pi):
    S = (WQ @ W0).T @ (WK @ W0) + np.log(pi)[None, :]
    S = S - S.max(axis=1, keepdims=True)
    A = np.exp(S)
    return A / A.sum(axis=1, keepdims=True)


def curves(ts, params, P, pi):
    """Loss, attention entropy and mass, singular values and right singular
    vectors of W0 at every save with t > 0, recomputed in NumPy."""
    keep = np.asarray(ts) > 0
    t = np.asarray(ts, dtype=np.float64)[keep]
    W0s, W1s, WQs, WKs = (
        np.asarray(x)[keep] for x in (params.W0, params.W1, params.WQ, params.WK)
    )
    T, d = t.shape[0], P.shape[0]
    loss = np.empty(T)
    H = np.empty(T)
    M = np.empty((T, d))
    n = min(W0s.shape[1], d)
    sv = np.empty((T, n))
    V = np.empty((T, n, d))
    for i in range(T):
        loss[i] = loss_and_grad(W0s[i], W1s[i], WQs[i], WKs[i], P, pi)[0]
        A = _attention(W0s[i], WQs[i], WKs[i], pi)
        with np.errstate(divide="ignore", invalid="ignore"):
            H[i] = -pi @ np.where(A > 0, A * np.log(A), 0.0).sum(axis=1)
        M[i] = pi @ A
        _, s, vt = np.linalg.svd(W0s[i], full_matrices=False)
        big = np.argmax(np.abs(vt), axis=1)
        vt = vt * np.sign(vt[np.arange(n), big])[:, None]
        sv[i], V[i] = s, vt
    r = sv[:, 1:] / sv[:, :1]
    return dict(t=t, loss=loss, H=H, M=M, r=r, V=V, d=d)


def _ddu(u, y):
    """d y / d u as the secant over [u - WINDOW/2, u + WINDOW/2] (clipped to
    the saved range), with np.interp between saves, column by column."""
    lo = np.clip(u - WINDOW / 2, u[0], u[-1])
    hi = np.clip(u + WINDOW / 2, u[0], u[-1])
    flat = y.reshape(y.shape[0], -1)
    out = np.empty_like(flat)
    for j in range(flat.shape[1]):
        out[:, j] = (np.interp(hi, u, flat[:, j]) - np.interp(lo, u, flat[:, j])) / (
            hi - lo
        )
    return out.reshape(y.shape)


# -- crossings ----------------------------------------------------------------


class _Axis:
    def __init__(self, t):
        self.t = t
        self.u = np.log(t)

    def cross(self, y, level, up):
        """Times (continuous sample positions x = i + f) of crossings."""
        z = y - level if up else level - y
        i = np.flatnonzero((z[:-1] <= 0) & (z[1:] > 0))
        return list(i + z[i] / (z[i] - z[i + 1]))

    def time(self, x):
        i = min(int(math.floor(x)), len(self.t) - 2)
        f = x - i
        return float(math.exp(self.u[i] + f * (self.u[i + 1] - self.u[i])))

    @staticmethod
    def value(y, x):
        i = min(int(math.floor(x)), y.shape[0] - 2)
        f = x - i
        return y[i] + f * (y[i + 1] - y[i])


def _peak_near(ax, y, x):
    """The maximum of samples y within WINDOW (in log t) of position x, with a
    parabola through its neighbours; returned as a sample position."""
    i = min(int(math.floor(x)), len(ax.u) - 2)
    ux = ax.u[i] + (x - i) * (ax.u[i + 1] - ax.u[i])
    cand = [j for j in range(1, len(ax.u) - 1) if abs(ax.u[j] - ux) <= WINDOW]
    if not cand:
        return x
    j = max(cand, key=lambda q: y[q])
    h1, h2 = ax.u[j] - ax.u[j - 1], ax.u[j + 1] - ax.u[j]
    # vertex of the parabola through (-h1, y0), (0, y1), (h2, y2)
    y0, y1, y2 = y[j - 1], y[j], y[j + 1]
    d1, d2 = (y1 - y0) / h1, (y2 - y1) / h2
    curv = (d2 - d1) / (h1 + h2)
    v = 0.0 if curv >= 0 else -(d1 * h2 + d2 * h1) / (h1 + h2) / (2 * curv)
    v = min(max(v, -h1), h2)
    uv = ax.u[j] + v
    k = min(max(int(np.searchsorted(ax.u, uv, side="right")) - 1, 0), len(ax.u) - 2)
    return k + min(max((uv - ax.u[k]) / (ax.u[k + 1] - ax.u[k]), 0.0), 1.0)


def _after(xs, x0):
    return next((x for x in xs if x > x0), None)


# -- the definitions, again ---------------------------------------------------


def label(c, *, H_pi, log_d, H_cond, loss0):
    """The stages of curves `c` (from `curves`), as a list of dicts with
    `name, cycle, t_start, t_end, tokens, sv_index`."""
    ax = _Axis(c["t"])
    u = ax.u
    last = float(len(u) - 1)
    speed = -_ddu(u, c["loss"]) / (log_d - H_cond)
    e = _ddu(u, c["H"]) / H_pi
    mu = _ddu(u, c["M"])
    rho = _ddu(u, np.log(np.maximum(c["r"], 1e-300)))
    out = []

    # plateaus: hysteresis on the speed
    escapes = ax.cross(speed, ESCAPE, True)
    entries = ax.cross(speed, ENTRY, False)
    plateau_list = []
    x, in_saddle, entry = -1.0, True, None
    while True:
        if in_saddle:
            nxt = _after(escapes, x)
            if entry is not None:
                plateau_list.append((entry, nxt))
            if nxt is None:
                break
            in_saddle, x, entry = False, nxt, None
        else:
            nxt = _after(entries, x)
            if nxt is None:
                break
            in_saddle, x, entry = True, nxt, nxt

    # new directions: openings widened to the growth bursts around them
    dirs = []
    for k in range(c["r"].shape[1]):
        rk, rhok = c["r"][:, k], rho[:, k]
        ups = ax.cross(rhok, DIR_RATE, True)
        downs = ax.cross(rhok, DIR_RATE, False)
        if rhok[0] > DIR_RATE:
            ups = [0.0] + ups
        bursts = []
        for a in ups:
            if bursts and (bursts[-1][1] is None or a < bursts[-1][1]):
                continue
            bursts.append((a, _after(downs, a)))
        lows = ax.cross(rk, DIR_LOW, True)
        prev = -1.0
        stopped = False
        for hi in ax.cross(rk, DIR_OPEN, True):
            cands = [p for p in lows if prev < p <= hi]
            if not cands:
                continue
            lo = cands[-1]
            blo = next(
                (b for b in bursts if b[0] <= lo and (b[1] is None or lo <= b[1])), None
            )
            bhi = next(
                (b for b in bursts if b[0] <= hi and (b[1] is None or hi <= b[1])), None
            )
            start = blo[0] if blo else lo
            end = (bhi[1] if bhi else hi) if not (bhi and bhi[1] is None) else None
            dirs.append((start, end, k))
            prev = hi
            if end is None:
                stopped = True
                break
        if not stopped and bursts and bursts[-1][1] is None:
            a = bursts[-1][0]
            if a > prev and ax.value(rk, a) < DIR_LOW:
                dirs.append((a, None, k))
    dirs.sort()
    starts, reach = [], -1.0
    for a, b, k in dirs:
        if a > reach:
            starts.append(a)
        reach = max(reach, math.inf if b is None else b)
        out.append(
            dict(
                name="new_direction",
                cycle=len(starts) + 1,
                a=a,
                b=b,
                tokens=(),
                k=k + 1,
            )
        )

    def cycle(x):
        return 1 + sum(s <= x for s in starts)

    if loss0 > 0.5 * (log_d + H_pi):
        out.append(
            dict(
                name="condensation",
                cycle=1,
                a=None,
                b=plateau_list[0][0] if plateau_list else None,
                tokens=(),
                k=None,
            )
        )
    for a, b in plateau_list:
        out.append(dict(name="plateau", cycle=cycle(a), a=a, b=b, tokens=(), k=None))

    # focus episodes
    falls = ax.cross(e, -FOCUS_RATE, False)
    bottoms = ax.cross(e, 0.0, True)
    found, x = [], -1.0
    while True:
        a = _after(falls, x)
        if a is None:
            break
        bottom = _after(bottoms, a)
        j0 = int(math.floor(a)) + 1
        j1 = int(math.floor(bottom)) + 1 if bottom is not None else len(u) - 1
        j0 = min(j0, j1)
        steep = j0 + int(np.argmin(e[j0 : j1 + 1]))
        w = mu[steep]
        order = [int(k) for k in np.argsort(-w, kind="stable") if w[k] > 0]
        G, acc, tot = [], 0.0, sum(w[k] for k in order)
        for kk in order:
            if acc >= SHARE * tot * (1 - 1e-15):
                break
            G.append(kk)
            acc += w[kk]
        end = bottom
        if G:
            peak = _after(ax.cross(mu[:, G].sum(axis=1), 0.0, False), steep - 1e-9)
            if peak is not None:
                peak = _peak_near(ax, c["M"][:, G].sum(axis=1), peak)
            if peak is not None and (bottom is None or peak < bottom):
                end = peak
        endx = end if end is not None else last
        gain = ax.value(c["M"], endx) - ax.value(c["M"], a)
        G = sorted([kk for kk in G if gain[kk] > 0], key=lambda kk: -gain[kk])
        drop = (ax.value(c["H"], a) - ax.value(c["H"], endx)) / H_pi
        if G and drop >= ENTROPY_DROP and gain[G].sum() >= MASS_CHANGE:
            found.append((a, end, tuple(G)))
        if end is None:
            break
        x = max(end, bottom) if bottom is not None else end
    for j, (a, b, G) in enumerate(found):
        out.append(dict(name="focus", cycle=cycle(a), a=a, b=b, tokens=G, k=None))
        if b is None:
            continue
        stops = [p for p, _ in plateau_list if p > b]
        if j + 1 < len(found):
            stops.append(found[j + 1][0])
        stop = min(stops) if stops else None
        m0 = ax.value(c["M"], b)[list(G)].sum()
        m1 = ax.value(c["M"], last if stop is None else stop)[list(G)].sum()
        if m0 - m1 >= MASS_CHANGE:
            out.append(
                dict(name="dilution", cycle=cycle(a), a=b, b=stop, tokens=G, k=None)
            )

    t0 = 0.0
    for s in out:
        s["t_start"] = t0 if s["a"] is None else ax.time(s["a"])
        s["t_end"] = ax.time(last) if s["b"] is None else ax.time(s["b"])
        s["complete"] = s["b"] is not None
    out.sort(key=lambda s: (s["t_start"], KINDS.index(s["name"])))
    return out


def label_trajectory(traj):
    ch = traj.problem.chain
    P, pi = np.asarray(ch.P), np.asarray(ch.pi)
    c = curves(traj.ts, traj.params, P, pi)
    H_pi = float(-(pi * np.log(pi)).sum())
    H_cond = float(-(pi[:, None] * np.where(P > 0, P * np.log(P), 0.0)).sum())
    return label(
        c,
        H_pi=H_pi,
        log_d=math.log(P.shape[0]),
        H_cond=H_cond,
        loss0=float(traj.loss[0]),
    ), c


# -- matching -------------------------------------------------------------------


def _logspan(s):
    a = math.log(max(s["t_start"], 1e-3))
    b = math.log(max(s["t_end"], 1e-3))
    return a, max(b, a + 1e-9)


def _iou(s1, s2):
    a1, b1 = _logspan(s1)
    a2, b2 = _logspan(s2)
    inter = max(0.0, min(b1, b2) - max(a1, a2))
    union = max(b1, b2) - min(a1, a2)
    return inter / union if union > 0 else 0.0


def _compatible(det, lab):
    if det["name"] != lab["name"]:
        return False
    if det["name"] == "new_direction" and det["k"] != lab["k"]:
        return False
    if det["name"] in ("focus", "dilution"):
        g1, g2 = set(det["tokens"]), set(lab["tokens"])
        if len(g1 & g2) / max(len(g1 | g2), 1) < 0.5:
            return False
    return _iou(det, lab) >= 0.5


def match(detected, labelled):
    """Greedy one-to-one matching (best overlap first). Returns per kind
    `(true positives, detected, labelled)` and the unmatched stages."""
    pairs = []
    for i, s in enumerate(detected):
        for j, t in enumerate(labelled):
            if _compatible(s, t):
                pairs.append((-_iou(s, t), i, j))
    pairs.sort()
    used_i, used_j = set(), set()
    for _, i, j in pairs:
        if i not in used_i and j not in used_j:
            used_i.add(i)
            used_j.add(j)
    counts = defaultdict(lambda: [0, 0, 0])
    for i, s in enumerate(detected):
        counts[s["name"]][1] += 1
        counts[s["name"]][0] += i in used_i
    for t in labelled:
        counts[t["name"]][2] += 1
    missed = [t for j, t in enumerate(labelled) if j not in used_j]
    extra = [s for i, s in enumerate(detected) if i not in used_i]
    return dict(counts), missed, extra


def as_plain(stage):
    """A detector `Stage` as the labeller's dict form."""
    return dict(
        name=stage.name,
        cycle=stage.cycle,
        t_start=stage.t_start,
        t_end=stage.t_end,
        tokens=tuple(stage.tokens),
        k=stage.sv_index,
        complete=stage.complete,
    )


# -- the evaluation ---------------------------------------------------------------


def default_grid_index(n_dense: int) -> np.ndarray:
    """Indices of the default 400 save times inside the dense grid of
    `benchmarks/stages_accuracy.py` (0, then every 4th time)."""
    return np.r_[0, np.arange(1, n_dense, 4)]


def openings(c):
    """Every opening of sigma_{k+1}/sigma_1 from below DIR_LOW to above DIR_OPEN
    on the labeller's curves: `(k + 1, t_low, t_high)`."""
    ax = _Axis(c["t"])
    out = []
    for k in range(c["r"].shape[1]):
        lows = ax.cross(c["r"][:, k], DIR_LOW, True)
        prev = -1.0
        for hi in ax.cross(c["r"][:, k], DIR_OPEN, True):
            cands = [p for p in lows if prev < p <= hi]
            if cands:
                out.append((k + 1, ax.time(cands[-1]), ax.time(hi)))
                prev = hi
    return out


def check_trajectory(traj, detected, *, time_tol=0.01):
    """Labels `traj` (dense saves) and checks `detected` (its stages on the
    default grid) against the labels and the issue's two invariants."""
    labelled, c = label_trajectory(traj)
    det = [as_plain(s) for s in detected]
    counts, missed, extra = match(det, labelled)
    ax = _Axis(c["t"])

    def H_at(t):
        x = np.interp(math.log(t), ax.u, np.arange(len(ax.u)))
        return float(ax.value(c["H"], x))

    rises = [
        H_at(s.t_end) - H_at(s.t_start)
        for s in detected
        if s.name == "focus" and s.t_start > c["t"][0]
    ]
    uncovered = []
    for k, lo, hi in openings(c):
        inside = any(
            s.name == "new_direction"
            and s.sv_index == k
            and s.t_start <= lo * (1 + time_tol)
            and s.t_end >= hi * (1 - time_tol)
            for s in detected
        )
        if not inside:
            uncovered.append((k, lo, hi))
    return dict(
        counts=counts,
        missed=missed,
        extra=extra,
        focus_entropy_change=rises,
        openings=len(openings(c)),
        uncovered=uncovered,
    )


def summarize(results):
    """Precision and recall per kind over a list of `check_trajectory` results."""
    tot = defaultdict(lambda: [0, 0, 0])
    for r in results:
        for k, (tp, nd, nl) in r["counts"].items():
            tot[k][0] += tp
            tot[k][1] += nd
            tot[k][2] += nl
    table = {}
    for k in KINDS:
        tp, nd, nl = tot[k]
        table[k] = dict(
            tp=tp,
            detected=nd,
            labelled=nl,
            precision=tp / nd if nd else math.nan,
            recall=tp / nl if nl else math.nan,
        )
    return table
