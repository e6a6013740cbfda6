#!/usr/bin/env bash
# GPU check of real_runtime on one GPU (written for one H200; any CUDA GPU works). Under 8 minutes, installs
# nothing. Run from anywhere:  OUT=/some/dir bash real_runtime/gpu_check.sh
#
# 1. environment: torch, CUDA, NCCL, flash-attn;
# 2. profiler on cuda in bf16 with the llama3-8b shapes (compute only: collectives need >1 GPU) -> $OUT/profile_gpu.csv,
#    then 'dcpsim calibrate' fits it -> $OUT/calibration_gpu.json;
# 3. engine tests: local attention incl. the CUDA/flash cases on the GPU; the multi-process CP engine, group-pool,
#    runner and profiler tests on CPU gloo (one GPU cannot host several NCCL ranks, and gloo cannot send CUDA
#    tensors point to point);
# 4. the runner on the GPU with NCCL, world size 1: fp32 with the single-process loss check, then bf16 at 16K context;
# 5. 'dcpsim validate' on the GPU (NCCL, one process): profile, calibrate, plan, simulate, run, compare;
# then a PASS/FAIL summary. Exit status: the number of failed steps.
set -uo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
[ -x .venv/bin/python ] && PY=.venv/bin/python
OUT=${OUT:-$(mktemp -d -t gpu_check.XXXX)}
mkdir -p "$OUT"
DEADLINE=$((SECONDS + ${BUDGET_S:-470}))
results=()
failed=0

step() {  # step NAME MAX_SECONDS CMD...: run with a timeout that also respects the global deadline
  local name=$1 max=$2; shift 2
  local left=$((DEADLINE - SECONDS))
  if [ "$left" -lt 15 ]; then results+=("SKIP  $name (time budget spent)"); failed=$((failed + 1)); return; fi
  [ "$max" -gt "$left" ] && max=$left
  echo; echo "=== $name (limit ${max}s)"
  local t0=$SECONDS
  timeout --kill-after=10 "$max" "$@" 2>&1 | tee "$OUT/$name.log" | tail -n 25
  local rc=${PIPESTATUS[0]}
  if [ "$rc" -eq 0 ]; then results+=("PASS  $name ($((SECONDS - t0))s)")
  else results+=("FAIL  $name (exit $rc after $((SECONDS - t0))s, log $OUT/$name.log)"); failed=$((failed + 1)); fi
}

step environment 60 "$PY" -c '
import torch, torch.distributed as dist
assert torch.cuda.is_available(), "no CUDA GPU visible"
print("torch", torch.__version__, "| cuda", torch.version.cuda, "|", torch.cuda.get_device_name(0),
      "| GPUs", torch.cuda.device_count(), "| nccl", dist.is_nccl_available())
from real_runtime.attention.flash import flash_attn_available
print("flash-attn available:", flash_attn_available())'

step profile 120 "$PY" -m dcpsim.real_runtime.profile --out "$OUT/profile_gpu.csv" --device cuda --dtype bfloat16 \
  --model llama3-8b
step calibrate 60 "$PY" -m dcpsim calibrate "$OUT/profile_gpu.csv" -o "$OUT/calibration_gpu.json" \
  --gpu h200 --name h200-gpu-check --report

step engine-tests 200 "$PY" -m pytest -q -p no:cacheprovider tests/real_runtime

step runner-fp32 90 "$PY" -m dcpsim.real_runtime.run --policy hydra --nproc 1 --backend nccl --device cuda \
  --iterations 2 --context-len 4096 --tokens 16384 --check --out "$OUT/run_fp32"
step runner-bf16 90 "$PY" -m dcpsim.real_runtime.run --policy mcore-dcp --nproc 1 --backend nccl --device cuda \
  --dtype bfloat16 --iterations 2 --context-len 16384 --tokens 65536 --median-len 2048 --warmup 1 \
  --out "$OUT/run_bf16"

step validate 150 "$PY" -m dcpsim validate --backend nccl --device cuda --nproc 1 --iterations 2 \
  --context-len 8192 --tokens 32768 --median-len 1024 --out "$OUT/validate"

echo; echo "=== summary (outputs in $OUT)"
printf '%s\n' "${results[@]}"
exit "$failed"
