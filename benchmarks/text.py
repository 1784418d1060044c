"""Throughput and peak memory of the text loader, today's code against main's.

    python benchmarks/text.py                 # 60 MB: main's loader vs this one
    python benchmarks/text.py --big           # and the 500 MB file (slow)
    python benchmarks/text.py --out text.json
    python benchmarks/text.py --big --skip-small --big-levels word char

The corpora are generated, deterministically, into a temporary folder that is
deleted afterwards: words of the built-in corpus (Python's documentation
topics), drawn i.i.d. with a Zipf law over their frequency rank (exponent 1.1,
seed 0), in lines of 5 to 24 words ending with a full stop. Every measurement
runs in its own subprocess, so that its peak RSS (`ru_maxrss`) is its own; the
RSS after importing gradflow (JAX included) is reported beside it, and the
loader's own share is the difference. Times are wall clock and CPU time of the
process: the machine is shared, and CPU time is the fairer measure of the
loader's work when other jobs compete for the cores.

What is measured, per case: `gf.text.load(path, level)` and then
`gf.text.encode(corpus, vocab_size)` (tokens, bigram chain), as a user calls
them; "main" is the same calls on the `main` branch's gradflow (its package
`gradflow/`, exported with `git archive` into a temporary folder and put on
the measuring process's `PYTHONPATH`).
"""

import argparse
import io
import json
import os
import re
import subprocess
import sys
import tarfile
import tempfile
import time
from collections import Counter
from pathlib import Path


ROOT = Path(__file__).resolve().parent.parent
# where each implementation's gradflow is imported from (`main`: set by
# `export_main`)
CHECKOUTS = {"new": ROOT}


def make_corpus(path: Path, n_bytes: int, seed: int = 0, exponent: float = 1.1):
    """Writes about `n_bytes` of Zipf-resampled built-in words to `path`."""
    import numpy as np

    from gradflow.text import builtin_text

    words = re.findall(r"[^\W_]+(?:'[^\W_]+)*", builtin_text())
    vocab = np.array([w for w, _ in Counter(words).most_common()], dtype=object)
    p = 1.0 / np.arange(1, vocab.size + 1) ** exponent
    p /= p.sum()
    rng = np.random.default_rng(seed)
    written = 0
    with open(path, "w", encoding="utf-8") as f:
        while written < n_bytes:
            lens = rng.integers(5, 25, size=20_000)
            ws = vocab[rng.choice(vocab.size, size=int(lens.sum()), p=p)]
            bounds = np.concatenate([[0], np.cumsum(lens)])
            lines = [" ".join(ws[a:b]) + "." for a, b in zip(bounds[:-1], bounds[1:])]
            chunk = ("\n".join(lines) + "\n").encode("utf-8")
            chunk = chunk[: n_bytes - written]
            f.write(chunk.decode("utf-8", "ignore"))
            written += len(chunk)
    return path


def _rss_mb() -> float:
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def export_main(folder: Path, ref: str = "main") -> Path:
    """The package `gradflow/` of git revision `ref`, written under `folder`
    (and recorded as the checkout of the implementation "main")."""
    archive = subprocess.run(
        ["git", "-C", str(ROOT), "archive", ref, "gradflow"],
        check=True,
        capture_output=True,
    ).stdout
    out = folder / "main"
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        tar.extractall(out, filter="data")
    CHECKOUTS["main"] = out
    return out


def measure(impl: str, path: str, level: str, vocab_sizes: list[int]) -> dict:
    """One case, in this process (run it in a fresh one, with the checkout of
    `impl` on `PYTHONPATH`)."""
    import numpy as np

    import gradflow.text as text

    base = _rss_mb()
    t, c = time.perf_counter(), time.process_time()
    kwargs = {} if impl == "main" else {"progress": False}
    corpus = text.load(path, level, **kwargs)
    load_wall, load_cpu = time.perf_counter() - t, time.process_time() - c
    out = {
        "impl": impl,
        "level": level,
        "file_bytes": os.path.getsize(path),
        "tokens": len(corpus),
        "load_wall_s": load_wall,
        "load_cpu_s": load_cpu,
        "rss_after_import_mb": base,
        "encode": [],
    }
    if impl != "main":
        out["corpus_id_bytes"] = int(sum(b.nbytes for b in corpus.blocks))
    if level == "bpe" and os.path.getsize(path) < 1e8:
        # (the training alone; `encode` below trains again and encodes)
        t, c = time.perf_counter(), time.process_time()
        text.train_bpe(corpus, vocab_sizes[0])
        out["bpe_train_wall_s"] = time.perf_counter() - t
        out["bpe_train_cpu_s"] = time.process_time() - c
    for k in vocab_sizes:
        t, c = time.perf_counter(), time.process_time()
        stream = text.encode(corpus, k, level=level)
        ids = np.asarray(stream.ids)
        chain = stream.chain
        ok = bool(
            np.all(np.asarray(chain.P) > 0)
            and abs(float(np.sum(chain.pi)) - 1) < 1e-9
            and len(chain.tokens) == k
        )
        out["encode"].append(
            {
                "vocab_size": k,
                "wall_s": time.perf_counter() - t,
                "cpu_s": time.process_time() - c,
                "stream_tokens": int(ids.size),
                "id_dtype": str(ids.dtype),
                "id_bytes": int(ids.nbytes),
                "valid_chain": ok,
                "first_tokens": list(chain.tokens[:5]),
            }
        )
        del stream, ids, chain
    out["peak_rss_mb"] = _rss_mb()
    return out


def run_case(impl, path, level, vocab_sizes) -> dict:
    cmd = [sys.executable, __file__, "_measure", impl, str(path), level]
    cmd += [str(k) for k in vocab_sizes]
    env = {**os.environ, "PYTHONPATH": str(CHECKOUTS[impl])}
    done = subprocess.run(cmd, capture_output=True, text=True, env=env, check=False)
    if done.returncode:
        raise SystemExit(f"{impl} {level} failed:\n{done.stderr[-3000:]}")
    result = json.loads(done.stdout.strip().splitlines()[-1])
    total_wall = result["load_wall_s"] + result["encode"][0]["wall_s"]
    total_cpu = result["load_cpu_s"] + result["encode"][0]["cpu_s"]
    result["tokens_per_s_wall"] = result["tokens"] / total_wall
    result["tokens_per_s_cpu"] = result["tokens"] / total_cpu
    print(
        f"{impl:>5} {level:>4} {result['file_bytes'] / 1e6:6.0f} MB "
        f"{result['tokens']:>11,} tokens: load {result['load_wall_s']:6.1f} s "
        f"(cpu {result['load_cpu_s']:6.1f}), encode K={vocab_sizes[0]} "
        f"{result['encode'][0]['wall_s']:5.1f} s, "
        f"{result['tokens_per_s_cpu'] / 1e6:5.2f} M tokens/cpu-s, peak RSS "
        f"{result['peak_rss_mb']:6.0f} MiB (after import "
        f"{result['rss_after_import_mb']:4.0f}), ids "
        f"{result['encode'][0]['id_bytes'] / 1e6:5.0f} MB",
        flush=True,
    )
    return result


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--big", action="store_true", help="also the 500 MB file")
    parser.add_argument("--skip-small", action="store_true", help="not the 60 MB cases")
    parser.add_argument(
        "--big-levels", nargs="+", default=["word", "char", "bpe"], metavar="LEVEL"
    )
    parser.add_argument("--small-mb", type=float, default=60)
    parser.add_argument("--big-mb", type=float, default=500)
    parser.add_argument("--out", default=None, help="write the results as JSON")
    parser.add_argument(
        "--main-char", action="store_true", help="also main's loader at char level"
    )
    args = parser.parse_args()
    results = {"settings": vars(args), "cases": []}
    with tempfile.TemporaryDirectory() as folder:
        if not args.skip_small:
            small_cases(args, folder, results)
        if args.big:
            big = make_corpus(Path(folder) / "big.txt", int(args.big_mb * 1e6))
            big_cases = {
                "word": ("new", big, "word", [512, 256, 1024, 2048]),
                "char": ("new", big, "char", [64]),
                "bpe": ("new", big, "bpe", [1024]),
            }
            for case in [big_cases[level] for level in args.big_levels]:
                results["cases"].append(run_case(*case))
                save(results, args.out)
    save(results, args.out)


def small_cases(args, folder, results):
    export_main(Path(folder))
    small = make_corpus(Path(folder) / "small.txt", int(args.small_mb * 1e6))
    cases = [
        ("main", small, "word", [512]),
        ("new", small, "word", [512]),
        ("new", small, "char", [64]),
        ("new", small, "bpe", [1024]),
    ]
    if args.main_char:
        cases.insert(2, ("main", small, "char", [64]))
    for case in cases:
        results["cases"].append(run_case(*case))
        save(results, args.out)
    main_w, new_w = results["cases"][0], results["cases"][1]
    results["speedup_word_cpu"] = new_w["tokens_per_s_cpu"] / main_w["tokens_per_s_cpu"]
    results["speedup_word_wall"] = (
        new_w["tokens_per_s_wall"] / main_w["tokens_per_s_wall"]
    )
    print(
        f"word level, {args.small_mb:g} MB: {results['speedup_word_cpu']:.1f}x "
        f"main's tokens per CPU second ({results['speedup_word_wall']:.1f}x wall)",
        flush=True,
    )
    small.unlink()


def save(results, out):
    """Written after every case, so that a long run keeps what it measured."""
    if out:
        Path(out).write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "_measure":
        impl, path, level, *ks = sys.argv[2:]
        print(json.dumps(measure(impl, path, level, [int(k) for k in ks])))
    else:
        main()
