#!/usr/bin/env bash
# On the GPU machine, in one call: build for sm_90, then the mixture-of-experts checks and figures
# of docs/PERFORMANCE.md ("Mixture of experts"). Steps (env STEPS, default "build test kernels
# bench"):
# - build;
# - test: every CTest test labelled gpu but the big.* timings, CTEST_JOBS at once (default 3), or
#   those whose names match the regex TESTS (say TESTS="moe|route|attention");
# - kernels: the MoE kernels' timing tests (kernels_moe_test and kernels_moe_matvec_test big.*),
#   the router's and 2048-wide head's mat-vecs, the launch-chain floors, empty and streaming
#   (scripts/launch_chain_floor.cu), and the 30B layer's and a 35B DeltaNet layer's floors as a
#   chain and as one persistent kernel (scripts/persistent_layer_floor.cu);
# - bench: random Q4_K_M models of PRESETS (default the Qwen3-30B-A3B and Qwen3.5-35B-A3B
#   shapes), the first with ceilings, the rest against them;
# - ab: each preset under each entry of AB_ENVS (variables joined by commas; default
#   "TANDEM_CUDA_FUSED_SWIGLU=0 TANDEM_MOE_SWIGLU_ANY_WAVES=1 TANDEM_CUDA_SIDE_STREAM=0"), with
#   AB_ARGS (default "-p 0 -n 128 -r 2"), to set beside bench's figures;
# - sanitize: compute-sanitizer (memcheck, synccheck) over the kernel tests SANITIZE_TESTS
#   (default kernels_moe_matvec_test kernels_moe_route_test), big.* left out;
# - timeline: every kernel of a decode step of each preset as the chain runs it (graphs on;
#   CUPTI via scripts/kernel_timeline.cpp, read by scripts/timeline_step.py), by default and
#   under each of TIMELINE_ENVS (default none);
# - host: the host's share of each preset's decode token (scripts/host_gap.cpp: the period
#   between graph launches against the graph's GPU time);
# - profile: where a prefill token of the last preset goes (launch groups, no graphs);
# - decode: where a decode token of each preset goes, kernel by kernel (ncu on a 4-layer copy,
#   graphs off; scripts/ncu_last_token.py), by default and under each of DECODE_ENVS (default
#   none).
# Usage (repo root, .devdeps/ alongside): bash scripts/gpu_moe_run.sh
set -uo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root" || exit 1
build=${BUILD_DIR:-build-gpu} steps=${STEPS:-build test kernels bench} out=${OUT:-/tmp/moe-out}
presets=${PRESETS:-qwen3-30b-a3b qwen3.5-35b-a3b} args=${BENCH_ARGS:--p 2048 -n 128 -r 2}
mkdir -p "$out"
source scripts/gpu_env.sh
has() { [[ " $steps " == *" $1 "* ]]; }
tm=$build/client/tandem_model/tandem-model
model() { echo "/tmp/moe-$1.gguf"; }
date -u +%FT%TZ; nvidia-smi --query-gpu=name,memory.total --format=csv,noheader

if has build; then
  cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DTANDEM_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 \
    >"$out/configure.log" 2>&1 || { tail -20 "$out/configure.log"; exit 1; }
  cmake --build "$build" -j 16 -- -k 0 >"$out/build.log" 2>&1 || { grep -E "error|FAILED" "$out/build.log" | head -30; }
  echo "build done at $SECONDS s"
fi
if has bench || has profile || has ab || has timeline || has host; then  # made on the CPU while the tests run, one after another (memory)
  (for p in $presets; do
     [[ -f $(model "$p") ]] || "$tm" make --preset "$p" --type Q4_K_M --row-pool 256 -o "$(model "$p")" -q
   done) &
fi
if has test; then
  # Three at a time: many tests spend their time in the CPU reference (the machine has 16 cores).
  ctest --test-dir "$build" -L gpu -R "${TESTS:-.}" -E "^big\." -j "${CTEST_JOBS:-3}" --timeout 300 >"$out/ctest.log" 2>&1
  grep -E "tests passed|Failed|\*\*\*|Not Run" "$out/ctest.log" | head -30
  echo "tests done at $SECONDS s"
fi
if has sanitize; then
  san=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
  for t in ${SANITIZE_TESTS:-kernels_moe_matvec_test kernels_moe_route_test}; do
    for tool in memcheck synccheck; do
      timeout 300 "$san" --tool "$tool" --error-exitcode 1 "$build/tests/kernels/$t" --gtest_filter='-big.*' \
        >"$out/sanitizer-$tool-$t.log" 2>&1
      echo "compute-sanitizer $tool $t: rc $?"
      grep -E "ERROR SUMMARY|FAILED" "$out/sanitizer-$tool-$t.log" | head -5
    done
  done
fi
if has kernels; then
  "$build/tests/kernels/kernels_moe_test" --gtest_filter='big.*' 2>&1 | grep -E "moe |dense|FAILED" | head -40
  "$build/tests/kernels/kernels_moe_matvec_test" --gtest_filter='big.*' 2>&1 | grep -E "moe |dense|FAILED" | head -20
  nvcc -std=c++17 -arch=sm_90 -I. -o "$out/chain" scripts/launch_chain_floor.cu && "$out/chain" | grep -E "132 blocks|^stream|^smem|^l2"
  nvcc -std=c++17 -arch=sm_90 -o "$out/layer" scripts/persistent_layer_floor.cu && timeout 120 "$out/layer"
  "$build/tests/kernels/kernels_matvec_test" --gtest_filter='big.router_bandwidth:big.head_bandwidth' 2>&1 |
    grep -E "^router|^head Q6_K +248320|FAILED" | head -20
  echo "kernel timings done at $SECONDS s"
fi
if has bench; then
  wait
  first=1
  for p in $presets; do
    m=$(model "$p")
    [[ -f $m ]] || { echo "make $p failed"; continue; }
    if ((first)); then
      "$tm" bench -m "$m" $args 2>&1 | grep -E "^ceilings|^\| [^ ]+\.gguf" | sed -E 's/ +/ /g'
    else
      "$tm" bench -m "$m" $args --no-ceilings 2>&1 | grep -E "^\| [^ ]+\.gguf" | sed -E 's/ +/ /g'
    fi
    first=0
  done
fi
if has ab; then
  wait
  for p in $presets; do
    for v in ${AB_ENVS:-TANDEM_CUDA_FUSED_SWIGLU=0 TANDEM_MOE_SWIGLU_ANY_WAVES=1 TANDEM_CUDA_SIDE_STREAM=0}; do
      echo "$v:"
      env ${v//,/ } "$tm" bench -m "$(model "$p")" ${AB_ARGS:--p 0 -n 128 -r 2} --no-ceilings 2>&1 |
        grep -E "^\| [^ ]+\.gguf" | sed -E 's/ +/ /g'
    done
  done
fi
if has decode; then
  for p in $presets; do
    m=/tmp/moe-l4-$p.gguf
    [[ -f $m ]] || "$tm" make --preset "$p" --type Q4_K_M --n-layer 4 --row-pool 64 -o "$m" -q
    for v in TANDEM_CUDA_GRAPHS=0 ${DECODE_ENVS:-}; do  # the default, then each variant
      tag=$p${v#TANDEM_CUDA_GRAPHS=0}
      env TANDEM_CUDA_GRAPHS=0 "$v" timeout 200 ncu --metrics gpu__time_duration.sum --clock-control none --csv \
        --print-units base "$tm" bench -m "$m" -p 1 -n 4 -r 1 --no-ceilings >"$out/ncu-$tag.csv" 2>"$out/ncu-$tag.err"
      echo "decode kernels of $p (4 layers), $v:"
      python3 scripts/ncu_last_token.py "$out/ncu-$tag.csv" --width 90
    done
  done
fi
if has timeline; then  # every kernel of a decode step as the chain runs it (CUPTI, graphs on)
  wait
  g++ -std=c++17 -O2 -shared -fPIC -o "$out/libtimeline.so" scripts/kernel_timeline.cpp -I/usr/local/cuda/include \
    -L/usr/local/cuda/lib64 -L/usr/local/cuda/extras/CUPTI/lib64 \
    -Wl,-rpath,/usr/local/cuda/lib64:/usr/local/cuda/extras/CUPTI/lib64 -lcupti || echo "timeline: no CUPTI"
  for p in $presets; do
    for v in TANDEM_TIMELINE_DEFAULT=1 ${TIMELINE_ENVS:-}; do
      tag=$p${v#TANDEM_TIMELINE_DEFAULT=1}
      env "$v" TIMELINE_OUT="$out/timeline-$tag.csv" LD_PRELOAD="$out/libtimeline.so" \
        "$tm" bench -m "$(model "$p")" -p 0 -n 8 -r 1 --no-ceilings >/dev/null 2>"$out/timeline-$tag.err"
      echo "decode step of $p, $v: $(grep kernel_timeline "$out/timeline-$tag.err")"
      python3 scripts/timeline_step.py "$out/timeline-$tag.csv" --list 30 --width 48
    done
  done
fi
if has host; then
  wait
  g++ -std=c++17 -O2 -shared -fPIC -o "$out/libhostgap.so" scripts/host_gap.cpp -I/usr/local/cuda/include \
    -L/usr/local/cuda/lib64 -lcudart -ldl
  for p in $presets; do
    echo "$p: $(LD_PRELOAD="$out/libhostgap.so" "$tm" bench -m "$(model "$p")" -p 0 -n 128 -r 2 --no-ceilings 2>&1 |
      grep host_gap)"
  done
fi
if has profile; then
  wait
  last=${presets##* }
  "$tm" bench -m "$(model "$last")" -p 2048 -n 0 -r 1 --no-ceilings --profile 2>&1 | grep -E "^\| [a-zA-Z]" | head -30
fi
date -u +%FT%TZ
