#!/usr/bin/env bash
# The README's main command: installs the build dependencies, builds tandem's three programs (tandemd,
# tandem, tandem-model; Release, CUDA when found), fetches the default model SmolLM2, starts tandemd on
# a temporary socket and asks it one question. The daemon's log is kept (its path printed) on failure.
# Usage: scripts/demo.sh ["question"]   Env: BUILD_DIR (default build), JOBS, TANDEM_CUDA (AUTO|ON|OFF).
set -euo pipefail
cd "$(dirname "$0")/.."
question=${1:-What is the capital of France?}
build=${BUILD_DIR:-build}

bash scripts/install_deps.sh
# Same architecture rule as scripts/test.sh: the local GPU when there is one, else a quick sm_90 build.
archs=${TANDEM_CUDA_ARCHS:-}
if [ -z "$archs" ]; then
  if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then archs=native; else archs=90; fi
fi
cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DTANDEM_CUDA="${TANDEM_CUDA:-AUTO}" \
  -DCMAKE_CUDA_ARCHITECTURES="$archs" >/dev/null
cmake --build "$build" -j "${JOBS:-$(nproc)}" --target tandemd tandem tandem_model_cli
gguf=$(bash scripts/fetch_model.sh)

run_dir=$(mktemp -d "${TMPDIR:-/tmp}/tandem-demo.XXXXXX")
sock="$run_dir/tandemd.sock"
# --config /dev/null: the demo's settings only, whatever /etc/tandem/tandemd.toml holds.
# Serve from the first GPU when there is one (a CUDA build), else from the CPU backend.
gpu=-1
if [ "$archs" = native ]; then gpu=0; fi
"$build/daemon/tandemd" --socket "$sock" --config /dev/null --gpu "$gpu" --model "default=$gguf" \
  >"$run_dir/tandemd.log" 2>&1 &
daemon_pid=$!
stop_daemon() {
  local rc=$?
  if kill -0 "$daemon_pid" 2>/dev/null; then
    kill -TERM "$daemon_pid"       # SIGTERM: tandemd drains its requests and removes the socket
    wait "$daemon_pid" || true
  fi
  # On success the run directory goes; on failure its log stays for reading.
  if [ "$rc" -eq 0 ]; then rm -rf "$run_dir"; else echo "demo: failed; tandemd's log: $run_dir/tandemd.log" >&2; fi
}
trap stop_daemon EXIT
trap 'exit 130' INT TERM

tandem=("$build/client/tandem/tandem" --socket "$sock")
# Ready once the model is resident: the socket listens before the weights are loaded.
for _ in $(seq 600); do
  if ! kill -0 "$daemon_pid" 2>/dev/null; then
    echo "demo: tandemd exited; its log:" >&2
    cat "$run_dir/tandemd.log" >&2
    exit 1
  fi
  if [ -S "$sock" ] && "${tandem[@]}" models 2>/dev/null | grep resident >/dev/null; then break; fi
  sleep 0.1
done
"${tandem[@]}" models | grep resident >/dev/null || { echo "demo: model not resident after 60 s" >&2; exit 1; }

echo "> $question"
# Greedy (temperature 0), so the demo gives the same answer every time; the reply streams as it comes.
"${tandem[@]}" run --temp 0 -n 128 "$question"
echo "demo: the programs are $build/daemon/tandemd, $build/client/tandem/tandem and" \
  "$build/client/tandem_model/tandem-model; README.md's Installing puts them on PATH or installs them." >&2
