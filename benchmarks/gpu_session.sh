#!/usr/bin/env bash
# The GPU machine's share of the study, in parts that each fit a 10-minute command:
#
#   benchmarks/gpu_session.sh PART [PART...]
#
# PARTs: install (the wheels of `make gpu-wheels`, --no-index), quick (the quick GPU rows),
# seed (the seed-scale 1-GPU rows, strong scaling), cost (step time against batch size
# on the GPU, both controllers), cmdbuf (the same for PID under XLA command-buffer
# options), cpucost (1-device CPU step-cost sweeps and all-reduce latencies on 2/4/8
# CPU devices, for the projection model), cpu (the quick CPU rows with PID, strong
# scaling, 1/2/4/8 devices on the machine's own cores). Records land in $RESULTS (default results-gpu-machine/, a fresh folder, so
# that no record of another machine is resumed); after each part they are packed into
# $OUT/gpu_results.tgz when $OUT is set (and every 60 s), so that a command cut off by
# its time limit still returns what finished.
set -u
PY=${GPU_PYTHON:-python3}
RESULTS=${RESULTS:-results-gpu-machine}
WHEELS=${GPU_WHEELS:-.whl/gpu}

pack() {
  [ -n "${OUT:-}" ] || return 0
  [ -d "$RESULTS" ] && tar czf "$OUT/.pack.$BASHPID.tmp" "$RESULTS" && mv "$OUT/.pack.$BASHPID.tmp" "$OUT/gpu_results.tgz"
}

here() { $PY -c "from odestudy.study.matrix import machine_folder; print(machine_folder('$RESULTS'))"; }

cost() {  # cost LABEL CONTROLLER BATCHES [XLA_FLAGS]
  XLA_FLAGS="${4:-}" $PY benchmarks/step_cost.py --device gpu --controller "$2" \
    --batches "$3" --label "$1" --out "$(here)/step_cost/gpu-$2-$1.json"
}

# Also pack every 60 s, so that a call cut off by its time limit inside a long part still
# returns the scenarios that part finished (a part once lost 15 runs that way).
( while sleep 60; do pack; done ) &
PACKER=$!
trap 'kill $PACKER 2>/dev/null' EXIT

for part in "$@"; do
  echo "=== $part $(date -u +%H:%M:%S)"
  case $part in
    install) $PY -c "import papermill" 2>/dev/null || \
      $PY -m pip install --quiet --no-index --find-links "$WHEELS" \
        --no-build-isolation -e . ;;
    quick) $PY -m odestudy.cli matrix --scale quick --device gpu --results "$RESULTS" ;;
    seed) $PY -m odestudy.cli matrix --scale seed --device gpu --results "$RESULTS" \
        --select scaling=strong ;;
    cost) cost default pid 1,4,16,64,256
          cost default stepto 1,4,16,64,256 ;;
    cmdbuf) cost cmdbuf-off pid 1,32,256 "--xla_gpu_enable_command_buffer="
            cost cmdbuf-while pid 1,32,256 \
              "--xla_gpu_enable_command_buffer=FUSION,CUBLAS,CUBLASLT,CUSTOM_CALL,CUDNN,CONDITIONAL,WHILE" ;;
    cpucost) for c in pid stepto; do JAX_PLATFORMS=cpu $PY benchmarks/step_cost.py \
          --device cpu --controller $c --batches 4,8,16,32,64,128,256 --label default \
          --out "$(here)/step_cost/cpu-$c-default.json"; done
        for n in 2 4 8; do for size in 1 4482; do JAX_PLATFORMS=cpu $PY \
          benchmarks/collectives.py --device cpu --devices $n --size $size \
          --out "$(here)/collectives/cpu-$n-$size.json"; done; done ;;
    cpu) JAX_PLATFORMS=cpu $PY -m odestudy.cli matrix --scale quick --device cpu \
        --results "$RESULTS" --select scaling=strong,processes=1,controller=pid ;;
    *) echo "unknown part $part; valid: install quick seed cost cmdbuf cpucost cpu" >&2
       exit 2 ;;
  esac
  echo "=== $part done rc=$? $(date -u +%H:%M:%S)"
  nvidia-smi --query-gpu=name,memory.used --format=csv,noheader 2>/dev/null
  pack
done
