"""Runs one small sweep and writes its results to a file (used by
tests/test_sweep_devices.py in subprocesses: several CPU devices, or one of
several processes joined by jax.distributed).

    python tests/sweep_worker.py OUT.npz [PROCESS_ID NUM_PROCESSES PORT]
"""

import sys


def main(argv):
    out = argv[0]
    if len(argv) > 1:
        import jax

        process_id, num_processes, port = (int(a) for a in argv[1:4])
        jax.distributed.initialize(
            coordinator_address=f"127.0.0.1:{port}",
            num_processes=num_processes,
            process_id=process_id,
            initialization_timeout=60,
        )
    import jax
    import numpy as np

    import gradflow as gf

    # The traces of the solve's chunk (`_advance`): one a process, however
    # many lanes the sweep runs (the lanes on other devices take the first
    # lane's trace: gradflow/_sweep/lanes.py)
    traces = []

    def on_duration(event, duration, fun_name="", **_):
        if event == "/jax/core/compile/jaxpr_trace_duration" and fun_name == "_advance":
            traces.append(duration)

    jax.monitoring.register_event_duration_secs_listener(on_duration)
    sw = small_sweep(gf)
    times = [[e.t for e in traj.events] for traj in sw]
    flat = np.array([t for ts in times for t in ts])
    counts = np.array([len(ts) for ts in times])
    np.savez(
        out,
        loss=sw.loss,
        final=np.array([traj.loss[-1] for traj in sw]),
        steps=np.array(sw.stats.num_steps),
        event_times=flat,
        event_counts=counts,
        devices=sw.stats.num_devices,
        processes=sw.stats.num_processes,
        padding=sw.stats.padding,
        chunk_traces=len(traces),
    )


DELTAS = (0.0, 0.1)
SEEDS = (0, 1, 2, 3)
D, M, T1 = 4, 4, 400.0
# Small chunks: a few chunks per solve (the host loop, event reading and
# checkpoints between chunks are exercised), and one compiled chunk shared by
# every sweep of this shape in a test session.
CHUNK_STEPS = 100
_CACHE = {}


def small_sweep(gf, **run_options):
    """The tests' sweep: 2 chains x 4 seeds of sticky(4, 0.5, 0.5, delta),
    width 4, t1 = 400, chunks of `CHUNK_STEPS` steps; `run_options` (e.g.
    `batch_size`) go to its `gf.Run` (cached per options within a process)."""
    key = tuple(sorted(run_options.items()))
    if key not in _CACHE:
        _CACHE[key] = gf.sweep(
            [gf.chains.sticky(D, 0.5, 0.5, x) for x in DELTAS],
            init_scale=1e-3,
            seeds=SEEDS,
            width=M,
            t1=T1,
            labels={"delta": DELTAS},
            run=gf.Run(progress=False, chunk_steps=CHUNK_STEPS, **run_options),
        )
    return _CACHE[key]


if __name__ == "__main__":
    main(sys.argv[1:])
