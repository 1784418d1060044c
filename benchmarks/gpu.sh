#!/usr/bin/env bash
# One-shot GPU benchmark for a session that has the device machine (none was
# lent to the session that wrote this script, so it has NOT been run yet).
#
# Run it through the device tool from the repository root, e.g.
#     run(command="bash benchmarks/gpu.sh", timeout_s=580)
# The device image has python3 with jax[cuda], diffrax, equinox, optimistix,
# lineax, jaxtyping and scipy (see /work/.library/device/KINDS.md); gradflow
# itself is imported from the working tree through PYTHONPATH.
#
# It writes everything under $OUT (or ./gpu-out when OUT is unset):
#   sweep.md, sweep.json  issue 13's criterion: 64 members against one, and
#                      the cost per member at 1, 8, 64, 256 and 1,024 members
#                      (on a GPU every member of the device in one vmap)
#   solvers-quick.md   the quick solver table (sticky scenario), float64
#   scaling-grad.md    time per gradient / HVP for d = 8 ... 2048, float64
#   env.txt            versions and the GPU
# Risk: the sticky scenario is tiny (224 parameters), so on a GPU each Tsit5
# step is kernel-launch bound; the tight reference (about 700,000 Tsit5 steps)
# and the Tsit5 baseline may not finish inside the 330 s given to them. The
# scaling table (large d) is the part where the GPU should shine.
# Float32: gradflow.integrate(dtype="float32") works on GPU, but the benchmark
# tables are float64 only (the tight reference needs it); a float32 table is
# still to be written.
set -u -o pipefail
OUT="${OUT:-gpu-out}"
mkdir -p "$OUT"
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
export PYTHONUNBUFFERED=1
PY="${PYTHON:-python3}"
{
  date -u
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv || true
  "$PY" -c "import jax, diffrax, equinox; print('jax', jax.__version__, jax.devices()); print('diffrax', diffrax.__version__, 'equinox', equinox.__version__)"
} > "$OUT/env.txt" 2>&1
cat "$OUT/env.txt"
# The sweep first (issue 13's GPU criterion), then the grad/HVP table (short,
# where a GPU should shine), then the quick solver table; 580 s in all at most.
timeout 240 "$PY" benchmarks/sweep.py --sizes 1 8 64 256 1024 --json "$OUT/sweep.json" 2>&1 | tee "$OUT/sweep.md"
timeout 120 "$PY" benchmarks/scaling.py --max-d 2048 --skip-cycle 2>&1 | tee "$OUT/scaling-grad.md"
# The quick solver table (computes the tight Tsit5 reference first, cached in $OUT).
timeout 220 "$PY" benchmarks/solvers.py --quick --cache "$OUT/cache" 2>&1 | tee "$OUT/solvers-quick.md"
