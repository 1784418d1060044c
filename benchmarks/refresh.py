"""The W-refresh rule and the adaptive rank of the Rosenbrock-W solver
(issue 27), side by side in one process: the rule before ("residual", fixed
rank 16) against the default from 512 parameters on ("growth" with an
adaptive rank, `ROS34PW2()`), and each change alone, on

- the full variant of docs/variants.md (2 heads, 2 layers, value, residual,
  RMS norm; sticky(6, .5, .5, .05), width 8, t1 = 5000; 872 parameters),
  whose Hessian has 25 eigenvalues above 1;
- the 256-word text chain of docs/text.md (built-in corpus, width 16,
  t1 = 1500; 8,704 parameters), whose 17th eigenvalue stays below 0.4.

Both bare (`gf.SaveAt(stages=False)`), compiled first on a short run.

    PYTHONPATH=. python benchmarks/refresh.py [--doc docs/performance.md]

`--doc` writes the table between `<!-- refresh-rule -->` and
`<!-- /refresh-rule -->`.
"""

import os


os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import argparse  # noqa: E402
import time  # noqa: E402

import gradflow as gf  # noqa: E402
from gradflow.solvers import ROS34PW2  # noqa: E402


SOLVERS = {
    "before: residual, rank 16": ROS34PW2(refresh="residual", max_rank=None),
    "growth, rank 16": ROS34PW2(max_rank=None),
    "residual, adaptive rank": ROS34PW2(refresh="residual"),
    "default: growth, adaptive rank": ROS34PW2(),
}


def scenarios(which):
    chain = gf.chains.sticky(6, 0.5, 0.5, 0.05)
    full = gf.Model(heads=2, layers=2, value=True, residual=True, norm="rms")
    if "full" in which:
        yield "full variant", chain, dict(width=8, t1=5000.0, model=full)
    if "text" in which:
        text = gf.text.encode(None, vocab_size=256, level="word").chain
        yield "256-word text", text, dict(width=16, t1=1500.0)


def load() -> str:
    return "{:.2f} {:.2f} {:.2f}".format(*os.getloadavg())


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scenarios", nargs="+", default=["full", "text"])
    parser.add_argument("--solvers", nargs="+", default=list(range(len(SOLVERS))),
                        type=int, help="indices into the list of solvers")  # fmt: skip
    parser.add_argument("--doc", default=None)
    args = parser.parse_args()
    names = [list(SOLVERS)[i] for i in args.solvers]
    lines = [
        "| scenario | solver | wall s | steps (rejected) | gradient evaluations | "
        "HVPs | W rank at the end | final loss | load |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for label, chain, kw in scenarios(args.scenarios):
        for name in names:
            solver = SOLVERS[name]
            run = dict(
                kw,
                run=gf.Run(progress=False),
                saveat=gf.SaveAt(stages=False),
                solver=solver,
            )
            gf.integrate(chain, 1e-3, **dict(run, t1=1.0))  # compile
            t = time.perf_counter()
            traj = gf.integrate(chain, 1e-3, **run)
            wall = time.perf_counter() - t
            st = traj.stats
            line = (
                f"| {label} | {name} | {wall:.1f} | {st.num_steps} "
                f"({st.num_rejected_steps}) | {st.num_grad_evals} | "
                f"{st.num_hvps} | {st.w_rank} | {float(traj.loss[-1]):.15f} | "
                f"{load()} |"
            )
            lines.append(line)
            print(line, flush=True)
    table = "\n".join(lines)
    print("\n" + table)
    if args.doc:
        begin, end = "<!-- refresh-rule -->", "<!-- /refresh-rule -->"
        gf.replace_between_markers(args.doc, begin, end, table)


if __name__ == "__main__":
    main()
