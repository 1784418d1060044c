"""Claims 5 and 6: the stages repeat in cycles (and in the same order for
every transition matrix with one pi), and real text goes through them."""

import jax
import numpy as np

import gradflow as gf

from .manifold import pooled_entropy
from .study import SIGNIFICANT, Row, Study, main_pi


# ---------------------------------------------------------------------------
# 5. Cycles
# ---------------------------------------------------------------------------


def swings(ts, values, h: float) -> list[tuple[float, float, str]]:
    """The turning points of a curve that reverse by at least `h` (a zigzag
    filter): `(t, value, "min" | "max")`, each confirmed by a move of `h` the
    other way after it."""
    out, direction, cand = [], 0, 0
    v = np.asarray(values)
    for i in range(1, v.size):
        if direction == 0:
            if abs(v[i] - v[0]) >= h:
                direction, cand = (1 if v[i] > v[0] else -1), i
        elif direction > 0:
            if v[i] > v[cand]:
                cand = i
            elif v[i] <= v[cand] - h:
                out.append((float(ts[cand]), float(v[cand]), "max"))
                direction, cand = -1, i
        else:
            if v[i] < v[cand]:
                cand = i
            elif v[i] >= v[cand] + h:
                out.append((float(ts[cand]), float(v[cand]), "min"))
                direction, cand = 1, i
    return out


def entropy_cycle(traj, H) -> dict:
    """An entropy curve `H` read at the stages of `traj`: its fall over the
    first focus (start to the focus's end), its rise over the first dilution
    (largest value in the stage over its value at the start) and its largest
    fall below its running maximum after the dilution ends."""
    ts = np.asarray(traj.ts)
    at = lambda t: int(np.argmin(np.abs(ts - t)))  # noqa: E731
    focus = next(s for s in traj.stages if s.name == "focus")
    dil = next((s for s in traj.stages if s.name == "dilution"), None)
    out = {
        "start": float(H[0]),
        "t_focus": focus.t_end,
        "focus": float(H[at(focus.t_end)]),
    }
    out["fall"] = out["start"] - out["focus"]
    if dil is None:
        return out | {"rise": float("nan"), "again": float("nan")}
    i0, i1 = at(dil.t_start), at(dil.t_end)
    j = i0 + int(np.argmax(H[i0 : i1 + 1]))
    out |= {"t_dil": float(ts[j]), "dil": float(H[j]), "rise": float(H[j] - H[i0])}
    drop = np.maximum.accumulate(H[i1:]) - H[i1:]
    k = i1 + int(np.argmax(drop))
    return out | {
        "again": float(drop.max()),
        "t_again": float(ts[k]),
        "low": float(H[k]),
    }


def cycle_text(c: dict) -> str:
    text = f"{c['start']:.4f} -> {c['focus']:.4f} (focus end, t = {c['t_focus']:.4g})"
    if np.isfinite(c["rise"]):
        text += f" -> {c['dil']:.4f} (largest in the dilution, t = {c['t_dil']:.4g}; rise {c['rise']:+.4f})"
        text += f"; later falls by {c['again']:.4f} (to {c['low']:.4f} at t = {c['t_again']:.4g})"
    return text


def rows_cycles(study: Study) -> list[Row]:
    rows = []
    for key in study.settings.scenarios:
        traj = study.flow(key)
        h = SIGNIFICANT * float(traj.problem.chain.unigram_entropy)
        for name, H in (("H(M), the pooled attention mass", pooled_entropy(traj)),
                        ("H_A, the pi-weighted attention entropy", np.asarray(traj.extras["att_entropy"]))):  # fmt: skip
            c = entropy_cycle(traj, H)
            rows.append(Row(5, "the entropy falls (focus), rises (dilution), falls again", key,
                            f"{name}: over the first focus, over the first dilution, after it",
                            "falls, rises, falls", cycle_text(c), "",
                            f"each move >= {SIGNIFICANT:.0%} of H(pi) = {h:.3g}",
                            bool(c["fall"] >= h and c["rise"] >= h and c["again"] >= h),
                            expect=name.startswith("H(M)"), see="figure paper_cycles"))  # fmt: skip
        focus = [s for s in traj.stages if s.name == "focus"]
        new = [s for s in traj.stages if s.name == "new_direction"]
        rows.append(Row(5, "the cycle repeats", key, "focus stages (their cycles) and new directions by t1",
                        ">= 2 focus stages, a new direction between",
                        f"{len(focus)} focus stages (cycles {[s.cycle for s in focus]}), {len(new)} new directions",
                        "", "two focus stages in different cycles", len({s.cycle for s in focus}) >= 2,
                        see="[stages.md](stages.md)"))  # fmt: skip
    if study.settings.ablation:
        rows += _ablation_rows(study)
    return rows


ORDER = ("condensation", "focus", "dilution", "new_direction")


def first_cycle(traj) -> list:
    """The first stage of each kind in ORDER, in time order."""
    firsts = [next((s for s in traj.stages if s.name == k), None) for k in ORDER]
    return sorted((s for s in firsts if s is not None), key=lambda s: s.t_start)


def _ablation_rows(study: Study) -> list[Row]:
    rows, diluted = [], []
    pi = np.array(main_pi(0.2))
    for name, traj in study.ablation().items():
        stages = first_cycle(traj)
        names = [s.name for s in stages]
        focus = next((s for s in stages if s.name == "focus"), None)
        in_order = names == [k for k in ORDER if k in names]
        token = focus.tokens[0] if focus else -1
        complete = {"condensation", "focus", "new_direction"} <= set(names)
        diluted.append("dilution" in names)
        rows.append(Row(5, "the same stages in the same order for every P with one pi", "ablation",
                        f"P = {name}: the first stage of each kind, in time order; the focus token",
                        " -> ".join(ORDER) + f"; token {int(np.argmax(pi))}",
                        " -> ".join(f"{s.name} ({s.t_start:.3g})" for s in stages) + f"; token {token}",
                        "", "in this order (dilution may be missing), focus on argmax pi",
                        bool(in_order and complete and token == int(np.argmax(pi))),
                        see="figure paper_cycles"))  # fmt: skip
    rows.append(Row(5, "the same stages in the same order for every P with one pi", "ablation",
                    "transition matrices whose first cycle has a dilution stage", f"{len(diluted)} of {len(diluted)}",
                    f"{sum(diluted)} of {len(diluted)}", "", "all", all(diluted), expect=False,
                    see="figure paper_cycles"))  # fmt: skip
    return rows


# ---------------------------------------------------------------------------
# 6. Real text
# ---------------------------------------------------------------------------

QUERIES = 4  # the query tokens followed: the most frequent ones after the top token


def attention_curves(traj) -> np.ndarray:
    """A at every save, shape (saves, d, d)."""
    chain = traj.problem.chain
    return np.asarray(jax.vmap(lambda p: gf.attention(p, chain))(traj.params))


def query_story(traj, A, q: int, top: int) -> dict:
    """For query token `q`: diffuse before the attention moves (KL(A_q || pi)
    at the end of condensation or the start of the first focus, whichever
    comes first: on text the first focus overlaps the end of condensation);
    the first turning point of A[q, top] (a max: focus); whether it gave back
    half of its gain after that (dilution); the first save after that where
    q's largest attention weight is on itself (focus on itself)."""
    ts = np.asarray(traj.ts)
    pi = np.asarray(traj.problem.chain.pi)
    starts = [s.t_end for s in traj.stages if s.name == "condensation"]
    starts += [s.t_start for s in traj.stages if s.name == "focus"][:1]
    i0 = int(np.flatnonzero(ts <= min(starts))[-1])
    kl = float(np.sum(A[i0, q] * np.log(A[i0, q] / pi)))
    curve = A[:, q, top]
    sw = swings(ts, curve, 0.01)
    peak = next((i for i, (t, v, k) in enumerate(sw) if k == "max"), None)
    out = {
        "kl": kl,
        "t_focus": float("nan"),
        "gain": float("nan"),
        "t_dilute": float("nan"),
        "t_self": float("nan"),
    }
    if peak is None or sw[:1] != sw[peak : peak + 1]:
        return out
    t_peak, v_peak, _ = sw[peak]
    out["t_focus"], out["gain"] = t_peak, v_peak - float(curve[i0])
    half = 0.5 * (v_peak + float(curve[i0]))
    later = np.flatnonzero((ts > t_peak) & (curve <= half))
    if later.size:
        out["t_dilute"] = float(ts[later[0]])
        own = np.flatnonzero((ts > ts[later[0]]) & (np.argmax(A[:, q], axis=1) == q))
        if own.size:
            out["t_self"] = float(ts[own[0]])
    return out


def rows_text(study: Study) -> list[Row]:
    traj = study.text()
    chain = traj.problem.chain
    pi = np.asarray(chain.pi)
    rank = {int(k): r + 1 for r, k in enumerate(np.argsort(-pi, kind="stable"))}
    tok = chain.tokens
    see = "[text.md](text.md#what-real-text-shows)"
    focus = [s for s in traj.stages if s.name == "focus"]
    dil = [s for s in traj.stages if s.name == "dilution"]
    label = lambda ks: ", ".join(f"{tok[k]!r} ({rank[k]})" for k in ks)  # noqa: E731
    rows = [Row(6, "frequent tokens draw the attention first", "text",
                "tokens of the first focus stage (rank by frequency)", "rank 1",
                label(focus[0].tokens) if focus else "no focus", "", "rank 1 first",
                bool(focus and rank[focus[0].tokens[0]] == 1), see=see)]  # fmt: skip
    h = SIGNIFICANT * float(chain.unigram_entropy)
    for name, H in (
        ("H(M)", pooled_entropy(traj)),
        ("H_A", np.asarray(traj.extras["att_entropy"])),
    ):
        c = entropy_cycle(traj, H)
        rows.append(Row(6, "then the attention dilutes", "text", f"{name}: over the first focus, over the first dilution",
                        "falls, rises", cycle_text(c), "", f"each move >= {SIGNIFICANT:.0%} of H(pi) = {h:.3g}",
                        bool(c["fall"] >= h and c["rise"] >= h), see=see))  # fmt: skip
    nxt = [s for s in focus if dil and s.t_start >= dil[0].t_end]
    rows.append(Row(6, "then medium-frequency tokens are learnt", "text",
                    "tokens of the first focus stage after the first dilution (rank)", "rank > 1",
                    label(nxt[0].tokens) + f" (t = {nxt[0].t_start:.4g})" if nxt else "none", "",
                    "not the most frequent token", bool(nxt and rank[nxt[0].tokens[0]] > 1), see=see))  # fmt: skip
    A = attention_curves(traj)
    top = int(np.argmax(pi))
    queries = [int(k) for k in np.argsort(-pi, kind="stable")[1 : 1 + QUERIES]]
    for q in queries:
        st = query_story(traj, A, q, top)
        steps = [
            st["kl"] <= 1e-3,
            np.isfinite(st["t_focus"]),
            np.isfinite(st["t_dilute"]),
            np.isfinite(st["t_self"]),
        ]
        rows.append(Row(6, "one query: diffuse, focused on whitespace, diluted, focused on itself", "text",
                        f"query {tok[q]!r} (rank {rank[q]}): KL(A_q || pi) before the first focus; A[q, {tok[top]!r}] peaks, gives back half its gain; argmax_k A[q, k] = q",
                        "all four, in order",
                        f"KL {st['kl']:.1e}; peak t = {st['t_focus']:.4g} (gain {st['gain']:+.3f}); diluted t = {st['t_dilute']:.4g}; on itself t = {st['t_self']:.4g}",
                        "", "KL <= 1e-3, then each step", all(steps), expect=q == queries[0],
                        see="figure paper_text"))  # fmt: skip
    return rows
