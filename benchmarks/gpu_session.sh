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
# scaling, 1/2/4/8 devices on the machine's own cores), levers (the PID step's levers on
# one GPU at $LEVER_SCALES: the default, the recommended step run by diffrax's loop, the
# fused solve's own reverse loop without and with the faster activations, XLA's command
# buffers; benchmarks/levers.py), predict (`odestudy predict` for 2, 4 and 8
# H100s from a 1-GPU sweep and the h100-nvlink profile), mapfused (the fused solve along
# the workload map on one GPU, as `make map-fused`: per controller of $MAP_CONTROLLERS and
# workload of $MAP_WORKLOADS, the default, the recommended step and the recommended step
# run by the fused solve; records under results/map/<machine>/fused/, packed with the
# machine's probes into $OUT/gpu_map.tgz), kernel (the kernel solve, `integrator=kernel`:
# one Pallas kernel per solve and one per reverse pass, against diffrax's default step,
# the recommended step run by diffrax's loop and the fused solve's own reverse loop, PID,
# one GPU, per scale of $KERNEL_SCALES, quick then seed: $KERNEL_LEVERS of
# benchmarks/levers.py, each trained to its own final loss, with the kernels each step
# launches; records levers/gpu-pid-<scale>-kernel.json (gpu: $KERNEL_DEVICE), packed
# after each scale, so that a call cut off during seed returns quick's, and
# KERNEL_SCALES=seed runs the rest), kernelsweep (the one-GPU batch sweep of the kernel
# solve per sample and within-ODE, per-device batch $SWEEP_BATCHES, PID:
# step_cost/gpu-pid-kernel.json and gpu-pid-within_ode+kernel.json). Records land in
# $RESULTS (default results-gpu-machine/, a fresh folder, so that no record of another
# machine is resumed); after each part they are packed into $OUT/gpu_results.tgz when
# $OUT is set (and every 60 s), so that a command cut off by its time limit still
# returns what finished. The exit status is the last failed part's
# (0 when every part ran).
#
# The best step (the recommended one, `odestudy.recommended`; `--recommended`), for a
# session lent a GPU (15 minutes of device time in all, 10 per command):
#
#   cpubest      the best step's quick CPU rows on this host's own cores: 1, 2, 4 and 8
#                devices, strong scaling, every mode, PID (`cpu` with the matrix's
#                --recommended); about 10 scenarios of 3 runs; resumable: a call cut off
#                by its limit is taken up by the next.
#   sweep        per controller of $SWEEP_CONTROLLERS (PID and StepTo): the best step's
#                quick 1-GPU row (one run; the trained model it saves is the sweep's),
#                then the one-GPU step-cost sweep of that model over per-device batch
#                $SWEEP_BATCHES (4 to 4096, powers of 4: a few minutes), a step-cost
#                record step_cost/gpu-<controller>-recommended.json (label recommended).
#   predictbest  `odestudy predict --recommended --profile h100-nvlink` for 2, 4 and 8
#                H100s (PID), from the trained model of the 1-GPU row `sweep` recorded
#                (no training again; without it, predict trains its own): records
#                predictions/gpu-pid-quick-N-h100-nvlink-recommended.json.
#
#   roofline     the device's roofline (`measure/roofline.py`: its float32 matmul peak,
#                memory bandwidth and the time one more kernel adds;
#                benchmarks/roofline.py), a few seconds: roofline/$KERNEL_DEVICE-<time>.json,
#                one per reading; the step page sets each GPU levers record of the
#                machine against the reading nearest its own session.
#
# Run order: install, cpubest, sweep, predictbest, each its own command (cpubest first if
# time is short: its rows are measured on real cores, the GPU's beyond one are predicted).
# The kernel solve's share: install, roofline, kernel, kernelsweep, each its own command.
#
#   all          the session's share in one command of at most 8 minutes: each PART:SECONDS
#                of $ALL_PARTS in turn, cut at its own budget (default: install, the
#                roofline, the kernel solve at the quick scale against the fused solve and
#                the default step, then the best step's 16-core CPU rows, `shard_map` on
#                1/2/4/8 devices). A part cut off keeps what it wrote: the matrix its
#                finished runs, levers.py its timed rows (written before the floor is
#                counted). `all` sets the kernel part's scales and variants and the CPU
#                rows' selection from KERNEL_SCALES_ALL, KERNEL_LEVERS_ALL and
#                CPU_SELECT_ALL (defaults: quick; default, the fused solve, the kernel
#                solve; PID strong 1 device and shard_map).
#
# Sizes can be set (tests/test_pipeline.py runs the CPU parts tiny): COST_SCALE (quick;
# the trained model of every step-cost sweep and of `sweep` and `predictbest`),
# COST_TIMED_STEPS, GPU_COST_BATCHES (`cost`), COST_CONTROLLERS and COST_BATCHES
# (`cpucost`'s sweeps), COLLECTIVE_DEVICES, COLLECTIVE_SIZES and COLLECTIVE_ITERATIONS
# (its all-reduce latencies), CPU_SCALE, CPU_SELECT and CPU_RUNS (`cpu` and `cpubest`: the
# rows and runs per row; default the matrix's), SWEEP_CONTROLLERS, SWEEP_BATCHES and
# SWEEP_DEVICE (`sweep` and `predictbest`: gpu; the test runs them on cpu),
# PREDICT_DEVICES (`predict` and `predictbest`), KERNEL_SCALES, KERNEL_LEVERS,
# KERNEL_BLOCKS and KERNEL_STEPS (`kernel`), KERNEL_DEVICE (`kernel` and `kernelsweep`:
# gpu; on cpu the kernels run in Pallas's interpret mode, a dry run that times nothing a
# GPU would; tests/test_pipeline.py runs `kernelsweep` so, tiny).
set -u
PY=${GPU_PYTHON:-python3}
RESULTS=${RESULTS:-results-gpu-machine}
WHEELS=${GPU_WHEELS:-.whl/gpu}
COST_SCALE=${COST_SCALE:-quick}
GPU_COST_BATCHES=${GPU_COST_BATCHES:-1,4,16,64,256}
CPU_SCALE=${CPU_SCALE:-quick}
CPU_SELECT=${CPU_SELECT:-scaling=strong,processes=1,controller=pid}
CPU_RUNS=${CPU_RUNS:-}
COST_CONTROLLERS=${COST_CONTROLLERS:-pid stepto}
COST_BATCHES=${COST_BATCHES:-4,8,16,32,64,128,256}
COST_TIMED_STEPS=${COST_TIMED_STEPS:-20}
COLLECTIVE_DEVICES=${COLLECTIVE_DEVICES:-2 4 8}
COLLECTIVE_SIZES=${COLLECTIVE_SIZES:-1 4482}
COLLECTIVE_ITERATIONS=${COLLECTIVE_ITERATIONS:-2000}
LEVER_SCALES=${LEVER_SCALES:-quick seed}
LEVERS_quick=${LEVERS_quick:-"default,within_ode+dense+all_steps(64)+unrolled,within_ode+fused_accepted(64),within_ode+fused_accepted(64)+fastact,within_ode+fused(64)+cmdbuf"}
LEVERS_seed=${LEVERS_seed:-"default,within_ode+dense+all_steps(64)+unrolled,within_ode+fused_accepted(64),within_ode+fused_accepted(64)+fastact"}
KERNEL_SCALES=${KERNEL_SCALES:-quick seed}
KERNEL_LEVERS=${KERNEL_LEVERS:-"default,within_ode+dense+all_steps(64)+unrolled,within_ode+fused_accepted(64),kernel(64),within_ode+kernel(64)"}
KERNEL_DEVICE=${KERNEL_DEVICE:-gpu}
KERNEL_BLOCKS=${KERNEL_BLOCKS:-4}
KERNEL_STEPS=${KERNEL_STEPS:-10}
PREDICT_DEVICES=${PREDICT_DEVICES:-2 4 8}
SWEEP_CONTROLLERS=${SWEEP_CONTROLLERS:-pid stepto}
SWEEP_BATCHES=${SWEEP_BATCHES:-4,16,64,256,1024,4096}
SWEEP_DEVICE=${SWEEP_DEVICE:-gpu}
MAP_CONTROLLERS=${MAP_CONTROLLERS:-pid stepto}
MAP_WORKLOADS=${MAP_WORKLOADS:-}
MAP_FUSED=${MAP_FUSED:-default,recommended-diffrax,recommended-fused}
MAP_BLOCKS=${MAP_BLOCKS:-6}
ALL_PARTS=${ALL_PARTS:-"install:20 roofline:30 kernel:345 cpubest:85"}

pack() {
  [ -n "${OUT:-}" ] || return 0
  [ -d "$RESULTS" ] && tar czf "$OUT/.pack.$BASHPID.tmp" "$RESULTS" && mv "$OUT/.pack.$BASHPID.tmp" "$OUT/gpu_results.tgz"
}

# This machine's folder of records under $RESULTS (after `install`: the package is needed).
here() { $PY -c "from odestudy.study.records import machine_folder; print(machine_folder('$RESULTS'))"; }

cost() {  # cost LABEL CONTROLLER BATCHES [XLA_FLAGS]
  local dir; dir=$(here) || return 1
  XLA_FLAGS="${4:-}" $PY benchmarks/step_cost.py --device gpu --controller "$2" \
    --scale "$COST_SCALE" --batches "$3" --timed-steps "$COST_TIMED_STEPS" --label "$1" \
    --out "$dir/step_cost/gpu-$2-$1.json"
}

cpucost() {  # 1-device CPU step-cost sweeps, then all-reduce latencies on N CPU devices
  local dir c n size r=0; dir=$(here) || return 1
  for c in $COST_CONTROLLERS; do JAX_PLATFORMS=cpu $PY benchmarks/step_cost.py \
    --device cpu --controller "$c" --scale "$COST_SCALE" --batches "$COST_BATCHES" \
    --timed-steps "$COST_TIMED_STEPS" --label default \
    --out "$dir/step_cost/cpu-$c-default.json" || r=1; done
  for n in $COLLECTIVE_DEVICES; do for size in $COLLECTIVE_SIZES; do JAX_PLATFORMS=cpu \
    $PY benchmarks/collectives.py --device cpu --devices "$n" --size "$size" \
    --iterations "$COLLECTIVE_ITERATIONS" --out "$dir/collectives/cpu-$n-$size.json" \
    || r=1; done; done
  return $r
}

levers() {  # the PID step's levers on one GPU, per scale of $LEVER_SCALES
  local dir sc variants r=0; dir=$(here) || return 1
  for sc in $LEVER_SCALES; do variants="LEVERS_$sc"; $PY benchmarks/levers.py --device gpu \
    --controller pid --scale "$sc" --variants "${!variants}" --blocks 6 --steps-per-block 10 \
    --out "$dir/levers/gpu-pid-$sc.json" || r=1; pack; done
  return $r
}

kernel() {  # the kernel solve against the fused solve and diffrax, PID, one GPU, per scale
  local dir sc r=0; dir=$(here) || return 1
  for sc in $KERNEL_SCALES; do $PY benchmarks/levers.py --device "$KERNEL_DEVICE" \
    --controller pid --scale "$sc" --variants "$KERNEL_LEVERS" --blocks "$KERNEL_BLOCKS" \
    --steps-per-block "$KERNEL_STEPS" --out "$dir/levers/$KERNEL_DEVICE-pid-$sc-kernel.json" \
    || r=1; pack; done
  return $r
}

kernelsweep() {  # the kernel solve's one-GPU batch sweep, per sample and within-ODE (PID)
  local dir label solve r=0; dir=$(here) || return 1
  for label in kernel within_ode+kernel; do
    solve=per_sample; [ "$label" = kernel ] || solve=within_ode
    $PY benchmarks/step_cost.py --device "$KERNEL_DEVICE" --controller pid --scale "$COST_SCALE" \
      --levers "{\"solve\": \"$solve\", \"integrator\": \"kernel\", \"adjoint\": \"accepted_steps\", \"max_steps\": 64}" \
      --batches "$SWEEP_BATCHES" --timed-steps "$COST_TIMED_STEPS" --label "$label" \
      --out "$dir/step_cost/$KERNEL_DEVICE-pid-$label.json" || r=1
    pack
  done
  return $r
}

predict() {  # N H100s predicted from one GPU's sweep and the h100-nvlink profile
  local dir n r=0; dir=$(here) || return 1; mkdir -p "$dir/predictions"
  for n in $PREDICT_DEVICES; do $PY -m odestudy.cli predict --device gpu --devices "$n" \
    --profile h100-nvlink --controller pid --scale quick --results "$RESULTS" \
    --out "$dir/predictions/gpu-pid-quick-$n-h100-nvlink.json" || r=1; done
  return $r
}

sweep() {  # per controller: the best step's 1-GPU row (2 runs), then its model's batch sweep
  local dir c r=0; dir=$(here) || return 1
  for c in $SWEEP_CONTROLLERS; do
    $PY -m odestudy.cli matrix --scale "$COST_SCALE" --device "$SWEEP_DEVICE" --recommended \
      --results "$RESULTS" --select "mode=single,scaling=strong,controller=$c" --runs 2 || r=1
    $PY benchmarks/step_cost.py --device "$SWEEP_DEVICE" --controller "$c" --recommended \
      --scale "$COST_SCALE" --results "$RESULTS" --batches "$SWEEP_BATCHES" \
      --timed-steps "$COST_TIMED_STEPS" --label recommended \
      --out "$dir/step_cost/$SWEEP_DEVICE-$c-recommended.json" || r=1
    pack
  done
  return $r
}

predictbest() {  # N H100s predicted for the best step, from the model of its 1-GPU row
  local dir n r=0; dir=$(here) || return 1; mkdir -p "$dir/predictions"
  for n in $PREDICT_DEVICES; do $PY -m odestudy.cli predict --device "$SWEEP_DEVICE" \
    --devices "$n" --profile h100-nvlink --recommended --controller pid --scale "$COST_SCALE" \
    --results "$RESULTS" \
    --out "$dir/predictions/$SWEEP_DEVICE-pid-$COST_SCALE-$n-h100-nvlink-recommended.json" \
    || r=1; done
  return $r
}

mapfused() {  # the fused solve along the map on one GPU, each controller's workloads in turn
  local dir here w c r=0
  here=$($PY -c "from odestudy.study.records import machine_folder as m; print(m('results'))") || return 1
  dir=$($PY -c "from odestudy.study.records import machine_folder as m; print(m('results/map'))")/fused
  [ -n "$MAP_WORKLOADS" ] || MAP_WORKLOADS=$($PY -c \
    "from odestudy.study.workloads import WORKLOADS; print(' '.join(w.slug() for w in WORKLOADS))")
  mkdir -p "$dir"
  for c in $MAP_CONTROLLERS; do for w in $MAP_WORKLOADS; do
    $PY benchmarks/levers.py --device gpu --controller "$c" --workload "$w" \
      --variants "$MAP_FUSED" --blocks "$MAP_BLOCKS" --steps-per-block 10 \
      --out "$dir/$w-$c.json" || r=1
    [ -n "${OUT:-}" ] && tar czf "$OUT/.map.tmp" "$dir" "$here" && mv "$OUT/.map.tmp" "$OUT/gpu_map.tgz"
  done; done
  return $r
}

# Also pack every 60 s, so that a call cut off by its time limit inside a long part still
# returns the scenarios that part finished (a part once lost 15 runs that way).
# Its output goes nowhere: a `sleep` still running when the script ends would otherwise
# hold the caller's pipe open for up to a minute (a test that captures the output waited
# for it).
( while sleep 60; do pack; done ) >/dev/null 2>&1 &
PACKER=$!
trap 'pkill -P $PACKER 2>/dev/null; kill $PACKER 2>/dev/null' EXIT

status=0
for part in "$@"; do
  echo "=== $part $(date -u +%H:%M:%S)"
  case $part in
    install) $PY -c "import papermill" 2>/dev/null || \
      $PY -m pip install --quiet --no-index --find-links "$WHEELS" \
        --no-build-isolation -e . ;;
    quick) $PY -m odestudy.cli matrix --scale quick --device gpu --results "$RESULTS" ;;
    seed) $PY -m odestudy.cli matrix --scale seed --device gpu --results "$RESULTS" \
        --select scaling=strong ;;
    cost) cost default pid "$GPU_COST_BATCHES"; r=$?
          cost default stepto "$GPU_COST_BATCHES" && (exit $r) ;;
    cmdbuf) cost cmdbuf-off pid 1,32,256 "--xla_gpu_enable_command_buffer="; r=$?
            cost cmdbuf-while pid 1,32,256 \
              "--xla_gpu_enable_command_buffer=FUSION,CUBLAS,CUBLASLT,CUSTOM_CALL,CUDNN,CONDITIONAL,WHILE" \
              && (exit $r) ;;
    cpucost) cpucost ;;
    levers) levers ;;
    predict) predict ;;
    mapfused) mapfused ;;
    cpu) JAX_PLATFORMS=cpu $PY -m odestudy.cli matrix --scale "$CPU_SCALE" --device cpu \
        --results "$RESULTS" --select "$CPU_SELECT" ${CPU_RUNS:+--runs "$CPU_RUNS"} ;;
    cpubest) JAX_PLATFORMS=cpu $PY -m odestudy.cli matrix --scale "$CPU_SCALE" --device cpu \
        --recommended --results "$RESULTS" --select "$CPU_SELECT" ${CPU_RUNS:+--runs "$CPU_RUNS"} ;;
    roofline) d=$(here) && $PY benchmarks/roofline.py --device "$KERNEL_DEVICE" \
        --out "$d/roofline/$KERNEL_DEVICE-$(date -u +%Y%m%dT%H%M).json" ;;
    sweep) sweep ;;
    predictbest) predictbest ;;
    kernel) kernel ;;
    kernelsweep) kernelsweep ;;
    all) r=0; for pb in $ALL_PARTS; do
           KERNEL_SCALES=${KERNEL_SCALES_ALL:-quick} \
           KERNEL_LEVERS=${KERNEL_LEVERS_ALL:-"default,within_ode+fused_accepted(64),kernel(64)"} \
           CPU_SELECT=${CPU_SELECT_ALL:-"scaling=strong,processes=1,controller=pid,mode=single|shard_map"} \
             timeout "${pb#*:}" bash "$0" "${pb%:*}" || r=$?
         done; (exit $r) ;;
    *) echo "unknown part $part; valid: install quick seed cost cmdbuf cpucost cpu levers predict mapfused cpubest sweep predictbest kernel kernelsweep roofline all" >&2
       exit 2 ;;
  esac
  rc=$?
  [ $rc -eq 0 ] || status=$rc
  echo "=== $part done rc=$rc $(date -u +%H:%M:%S)"
  nvidia-smi --query-gpu=name,memory.used --format=csv,noheader 2>/dev/null
  pack
done
exit $status
