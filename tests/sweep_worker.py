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
    import numpy as np

    import gradflow as gf

    sw = small_sweep(gf)
    times = [[e.t for e in traj.events] for traj in sw]
    flat = np.array([t for ts in times for t in ts])
    counts = np.array([len(ts) for ts in times])
    np.savez(
        out,
        loss=sw.loss,
        final=np.array([traj.loss[-1] for traj in sw]),
        steps=np.array(sw.stats["num_steps"]),
        event_times=flat,
        event_counts=counts,
        devices=sw.stats["num_devices"],
        processes=sw.stats["num_processes"],
        padding=sw.stats["padding"],
    )


def small_sweep(gf):
    deltas = [0.0, 0.05, 0.1]
    chains = [gf.chains.sticky(4, 0.5, 0.5, x) for x in deltas]
    return gf.sweep(
        chains,
        init_scale=1e-3,
        seeds=[0, 1],
        width=4,
        t1=400.0,
        labels={"delta": deltas},
        progress=False,
    )


if __name__ == "__main__":
    main(sys.argv[1:])
