#!/usr/bin/env bash
# One-shot GPU benchmark for a session that has the device machine. Not run
# by the sessions that wrote it (none was lent a device): every GPU number is
# "not measured" until a session runs this.
#
# Run it through the device tool from the repository root, e.g.
#     run(command="bash benchmarks/gpu.sh", timeout_s=590)
# The device image has python3 with jax[cuda], diffrax, equinox, optimistix,
# lineax, jaxtyping and scipy (see /work/.library/device/KINDS.md); gradflow
# itself is imported from the working tree through PYTHONPATH (flatbuffers and
# tokenizers, if missing, only turn off the exported chunk and BPE).
#
# Everything goes under $OUT (or ./gpu-out when OUT is unset), one file per
# part, each part with its own time limit (about 560 s in all):
#   env.txt            versions and the GPU
#   sweep.md/.json     the 64-member sweep against one member, and the cost
#                      per member at 1, 8, 64, 256 and 1,024 members (on a GPU
#                      every member of the device in one vmap)
#   closed-form.md     FLOP rates of the gradient and the HVP, autodiff and
#                      blocked forms, d = 256 ... 8192, width 16 and 32,
#                      against the GPU's float64 matrix-multiply rate
#   memory.md          device peak memory of one gradient / one HVP of the
#                      blocked form at d = 8192, 16384, 32768 (width 16)
#   flow-2048.md       the 2,048-word text flow (to t = 2000 or its budget)
#   flow-4096.md       the largest vocabulary tried: 4,096 words
#   startup.md         `gradflow run`, cold and warm, split into parts
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
# 1. Sweeps: on a GPU a sweep batches the members of a device under vmap.
timeout 150 "$PY" benchmarks/sweep.py --sizes 1 8 64 256 1024 --json "$OUT/sweep.json" 2>&1 | tee "$OUT/sweep.md"
# 2. The closed form at large d (rates against the GPU's float64 matmul).
timeout 110 "$PY" benchmarks/closed_form.py --ds 256 1024 2048 4096 8192 --ms 16 32 --rounds 2 --json "$OUT/closed-form.json" 2>&1 | tee "$OUT/closed-form.md"
timeout 60 "$PY" benchmarks/closed_form.py --memory --memory-ds 8192 16384 32768 --blocked-only 2>&1 | tee "$OUT/memory.md"
# 3. Large-vocabulary text flows of this checkout (a wall-clock budget each).
timeout 100 "$PY" benchmarks/text_speed.py --single 2048 --t1 2000 --budget 80 --out "$OUT/flow-2048" 2>&1 | tee "$OUT/flow-2048.md"
timeout 80 "$PY" benchmarks/text_speed.py --single 4096 --t1 4000 --budget 60 --out "$OUT/flow-4096" 2>&1 | tee "$OUT/flow-4096.md"
# 4. Start-up of the main job (cold, then warm), split into parts.
timeout 60 "$PY" benchmarks/startup.py --parts --repeats 1 2>&1 | tee "$OUT/startup.md"
