#!/usr/bin/env bash
# Every benchmark at its defaults (5 seeds, idle-CPU wait, overlapped runs repeated),
# one after the other, on an otherwise idle machine. Raw JSON goes to
# benchmarks/results/<name>-<UTC time>.json, each script's table to
# benchmarks/results/<name>.log (small: commit it with the JSON). Expect about 50 minutes on 2 idle cores (most of it
# ppo_cartpole: RLlib runs to its 300k-step / 180 s budget when it misses 450).
#
#   bash benchmarks/run_all.sh            # everything
#   bash benchmarks/run_all.sh --quick --no-idle-wait   # smoke run of every script
set -euo pipefail
cd "$(dirname "$0")/.."
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
out=benchmarks/results
case " $* " in *" --quick "*) out=benchmarks/results/smoke ;; esac
mkdir -p "$out"
run() {
  local name=$1; shift
  echo "== $name $*"
  python "benchmarks/$1.py" "${@:2}" 2>&1 | tee "$out/$name.log"
}
run startup startup "$@"
run sampling sampling "$@"
run local_overhead local_overhead "$@"
run ray_overhead ray_overhead "$@"
run profile_ppo profile_ppo "$@"
run ppo_cartpole-matched ppo_cartpole --matched "$@"
run ppo_cartpole-tuned ppo_cartpole --tuned "$@"
