#!/usr/bin/env bash
# Every benchmark under benchmarks/, one after the other, each at its defaults
# (3-5 seeds, a fresh process per system and seed, idle-CPU wait, overlapped runs
# repeated: see benchmarks/harness.py), on an otherwise idle machine. Raw JSON goes
# to benchmarks/results/<name>-<UTC time>.json, each script's table to
# benchmarks/results/<name>.log (small: commit it with the JSON). Options other than
# the ones below go to every script (e.g. --seeds 5). A benchmark that fails is
# reported and the others still run; the exit status is 1 if any failed.
#
# Expected duration on 2 idle cores: about 5 h 30 min in all (startup 2, sampling 5,
# models_throughput 20, vector_envs 10, local_overhead 5, ray_overhead 25 (3 seeds: 15) and --paired
# 15, compiled_graph 7, profile_ppo 5, ppo_cartpole --matched 25 and --tuned 25,
# impala_throughput 10, impala_fairness 8, async_cartpole 15, apex_throughput 10,
# replay 2, offline_reader 3, dqn_cartpole 20, multi_agent_sampling 3, ddppo_cartpole 8,
# offline_cartpole 10 (2 seeds), chaos 12,
# evaluation_overhead 5, tune_sweep 30 (3 seeds; an upper bound), memory_proofs --task stateless-cartpole 80 and --task cue-recall 10 minutes; the
# targeted ones are upper bounds, reached when runs use their whole budget), and
# about 5 h more for the two mujoco_ppo envs (3 seeds x 2 systems x 1M env steps;
# estimated from one run's own CPU seconds per system, about 18 min flowrl and 30 min
# SB3, not yet timed idle), many hours for the two mujoco_offpolicy envs (3 seeds x 2
# systems x 1M env steps, one 256x256 SAC update per step; not yet timed idle: give
# --sitting-steps to split them over sittings), about 2 min for sac_update_rate, many
# hours for offline_cql (SAC to a medium Hopper policy, 1M recorded steps, 200k CQL
# updates; not yet timed idle: give --sitting-minutes to split it over sittings),
# about 45 min for atari_throughput (9 systems x 3 seeds;
# not yet timed idle), about 5 min for profile_impala_pong, about 40 min for policy_lag
# (4 systems x 3 seeds x about 3 min), about 25 min for torch_threads (6 systems x 3 seeds), dqn_pong (2 systems x 3
# seeds x 2M frames, one core a run at about 53 agent steps/s alone: about 2.6 h a run, 16 h in all;
# its --resume-dir lets runs continue across sittings), up to 4 h 30 min for atari_learning (3 seeds x a 90 min
# budget; less for runs that reach +18), about 8 min for impala_value_probe, and the
# pong_curve runs (one seed each: PPO 4M agent steps, IMPALA 6M, APPO 3.5M; about 1,000
# agent steps/s for IMPALA, so hours each; run again, each continues from its newest
# checkpoint); pong_ball and loc (lines of code, last) take seconds.
# Idle waits add to it on a machine that is not idle.
# --quick --no-idle-wait (a smoke run of every script, results under
# benchmarks/results/smoke/) takes about 25 min.
#
#   bash benchmarks/run_all.sh                            # everything
#   bash benchmarks/run_all.sh replay dqn_cartpole        # a subset, by name
#   bash benchmarks/run_all.sh --only replay,chaos        # the same with --only
#   bash benchmarks/run_all.sh --quick --no-idle-wait     # smoke run of every script
#   bash benchmarks/run_all.sh --list                     # the names, in run order
# A selected subset runs in the order above; a stem selects every variant
# (ppo_cartpole: --matched and --tuned).
set -uo pipefail
cd "$(dirname "$0")/.."
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
export RAY_ADDRESS=local  # never attach to a Ray cluster that happens to run here

# name|script and its own options, in run order
BENCHMARKS=(
  "startup|startup"
  "sampling|sampling"
  "models_throughput|models_throughput"
  "vector_envs|vector_envs"
  "local_overhead|local_overhead"
  "ray_overhead|ray_overhead"
  "ray_overhead-paired|ray_overhead --paired --items 2000"
  # A compiled graph's processes escape the harness's per-run accounting (as RLlib's do).
  "compiled_graph|compiled_graph --overlap-peak 2.0 --overlap-mean 0.2 --max-attempts 2"
  "profile_ppo|profile_ppo"
  "ppo_cartpole-matched|ppo_cartpole --matched"
  "ppo_cartpole-tuned|ppo_cartpole --tuned"
  "impala_throughput|impala_throughput"
  "impala_fairness|impala_fairness"
  "async_cartpole|async_cartpole"
  "apex_throughput|apex_throughput"
  "replay|replay"
  "offline_reader|offline_reader"
  "dqn_cartpole|dqn_cartpole"
  "multi_agent_sampling|multi_agent_sampling"
  "ddppo_cartpole|ddppo_cartpole"
  "offline_cartpole|offline_cartpole"  # PPO expert, datasets, BC/MARWIL from them, IS/WIS
  "chaos|chaos"
  "evaluation_overhead|evaluation_overhead"
  "tune_sweep|tune_sweep"
  "memory_proofs-stateless_cartpole|memory_proofs --task stateless-cartpole"
  "memory_proofs-cue_recall|memory_proofs --task cue-recall"
  # Needs mujoco; 1M env steps per run (see the script's docstring for its length).
  "mujoco_ppo-Hopper-v5|mujoco_ppo --env Hopper-v5"
  "mujoco_ppo-HalfCheetah-v5|mujoco_ppo --env HalfCheetah-v5"
  # Needs mujoco and stable-baselines3; 1M env steps per run, resumable over sittings
  # (runs/mujoco_offpolicy/): run again and unfinished runs continue.
  "mujoco_offpolicy-sac-Hopper-v5|mujoco_offpolicy --algo sac --env Hopper-v5"
  "mujoco_offpolicy-sac-HalfCheetah-v5|mujoco_offpolicy --algo sac --env HalfCheetah-v5"
  "sac_update_rate|sac_update_rate"
  # Needs mujoco; SAC to a medium Hopper policy, its 1M-row dataset, CQL and BC from it:
  # many hours, resumable over sittings (runs/offline_cql/): run again to continue.
  "offline_cql-Hopper-v5|offline_cql --env Hopper-v5"
  # Needs ale-py; Sample Factory from its own venv (bash benchmarks/setup_sample_factory.sh,
  # else it is reported as skipped). atari_learning is 3 runs of up to 90 min each.
  "atari_throughput|atari_throughput"
  "profile_impala_pong|profile_impala_pong"
  "policy_lag|policy_lag"  # needs ale-py: IMPALA on Pong by learner queue size
  "impala_pong_checks|impala_pong_checks"  # needs ale-py; checks, times nothing: seconds
  "torch_threads|torch_threads"
  "dqn_pong|dqn_pong"
  "atari_learning|atari_learning"
  "impala_value_probe|impala_value_probe"  # needs ale-py; IMPALA's learner alone on fixed Pong batches
  # Pong learning curves in agent steps, resumable over sittings (runs/pong_curve/)
  "pong_curve-ppo|pong_curve --algo ppo --steps 4e6"
  "pong_curve-impala|pong_curve --algo impala --steps 6e6"
  "pong_curve-appo|pong_curve --algo appo --steps 3.5e6"
  "pong_ball|pong_ball"  # the ball's contrast in resized frames: seconds, times nothing
  "loc|loc"  # counts lines, times nothing: a few seconds
)

names() { for b in "${BENCHMARKS[@]}"; do echo "${b%%|*}"; done; }
# grep -q reads from a here-string, not a pipe: it may exit at the first match, and a
# pipe's writer would then die of SIGPIPE, which pipefail turns into "unknown"
known() { local all; all=$(names); grep -qx -- "$1" <<<"$all" || grep -q -- "^$1-" <<<"$all"; }

selected=()
pass=()
values=0
while (($#)); do
  case $1 in
    --list) names; exit 0 ;;
    --only) IFS=, read -ra more <<<"${2:-}"; selected+=("${more[@]}"); shift 2 || shift ;;
    --only=*) IFS=, read -ra more <<<"${1#--only=}"; selected+=("${more[@]}"); shift ;;
    -*) pass+=("$1"); values=1; shift ;;
    *) if known "$1"; then
         selected+=("$1"); values=0
       elif ((values)); then
         pass+=("$1")  # an option's value(s) (e.g. --seeds 5, --engines flowrl flowrl-agg)
       else
         echo "run_all.sh: unknown benchmark '$1'; choose from: $(names | tr '\n' ' ')" >&2
         exit 2
       fi
       shift ;;
  esac
done
for s in "${selected[@]}"; do
  known "$s" || { echo "run_all.sh: unknown benchmark '$s'; choose from: $(names | tr '\n' ' ')" >&2; exit 2; }
done

out=benchmarks/results
for a in "${pass[@]}"; do [[ $a == --quick ]] && out=benchmarks/results/smoke; done
mkdir -p "$out"

wanted() {  # a benchmark runs when nothing is selected, or its name (or its stem) is
  ((${#selected[@]} == 0)) && return 0
  local s
  for s in "${selected[@]}"; do [[ $1 == "$s" || ${1%%-*} == "$s" ]] && return 0; done
  return 1
}

failed=()
start=$SECONDS
for b in "${BENCHMARKS[@]}"; do
  name=${b%%|*}
  read -ra cmd <<<"${b#*|}"
  wanted "$name" || continue
  echo "== $name: python benchmarks/${cmd[0]}.py ${cmd[*]:1} ${pass[*]} ($(date -u +%H:%M:%S) UTC)"
  t=$SECONDS
  if ! python "benchmarks/${cmd[0]}.py" "${cmd[@]:1}" "${pass[@]}" 2>&1 | tee "$out/$name.log"; then
    failed+=("$name")
    echo "!! $name FAILED (see $out/$name.log)"
  fi
  echo "== $name took $((SECONDS - t)) s"
done
echo "== all done in $(((SECONDS - start) / 60)) min; tables in $out/<name>.log"
if ((${#failed[@]})); then
  echo "== FAILED: ${failed[*]}"
  exit 1
fi
