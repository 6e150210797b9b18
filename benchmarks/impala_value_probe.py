"""Does IMPALA's value function learn on Pong? An offline probe of the learner alone.

Samples fixed batches of ALE/Pong-v5 with the initial (near-uniform) policy of
``tuned_examples/impala-pong.yaml``, then trains a fresh IMPALA learner on them, one
``learn_on_batch`` per 500-row batch, for each variant of the model and gradient
clip below, and every 50 updates reports on held-out batches:

- ``ev``: the explained variance of the V-trace targets by the values (the
  ``vtrace_explained_var`` a run reports; RLlib 1.x's logged Pong runs show 0.3-0.9
  from their first 0.5M steps, flowrl's stalled runs about 0.01);
- ``value_std``: how much the value varies across states (0: it ignores the screen);
- ``dead``: per ReLU layer, the share of units that are 0 on every held-out row.

Variants: x / 255 or ``zero_mean`` ((x - 128) / 128) input, torch's or orthogonal
initialisation, and ``grad_clip`` 40 (flowrl's losses are means, so it never acts)
or 0.08 (RLlib 1.x's 40 on a loss summed over 500 rows, which acts on every step).
The learner sees the same batches in the same order in every variant.

Prints a table and writes ``benchmarks/results/impala_value_probe-<UTC time>.json``.
About 8 minutes on 2 CPUs; needs ale-py.

    python benchmarks/impala_value_probe.py [--updates 200]
"""

from __future__ import annotations

import argparse
import json
import os
import time

HERE = os.path.dirname(os.path.abspath(__file__))

VARIANTS = {
    "x/255, torch init, clip 40": {},
    "x/255, orthogonal, clip 40": {"orthogonal_init": True},
    "zero_mean, torch init, clip 40": {"zero_mean": True},
    "zero_mean, orthogonal, clip 40": {"orthogonal_init": True, "zero_mean": True},
    "x/255, orthogonal, clip 0.08": {"orthogonal_init": True, "grad_clip": 0.08},
    "zero_mean, orthogonal, clip 0.08": {"orthogonal_init": True, "zero_mean": True,
                                         "grad_clip": 0.08},
}


def build(spec: dict, variant: dict, seed: int):
    from flowrl.algorithms import IMPALA
    from flowrl.experiment import make_config

    variant = dict(variant)
    config = {"env": spec["env"], **spec["config"], "backend": "local", "num_workers": 1,
              "num_envs_per_worker": 10, "seed": seed}
    if "grad_clip" in variant:
        config["grad_clip"] = variant.pop("grad_clip")
    config["model"] = {**spec["config"].get("model", {}), **variant}
    return IMPALA(make_config(spec["algo"], config))


def probe(policy, batch) -> tuple[float, float, list[float]]:
    """``(explained variance, value std, dead share per ReLU layer)`` on ``batch``."""
    from impala_pong_checks import forward_with_dead_units

    train = policy._train_tensors(batch)
    _, values, logp, dead = forward_with_dead_units(policy, train)
    vs, _ = policy.vtrace_targets(train, logp, values)
    return 1.0 - float((vs - values).var() / vs.var()), float(values.std()), list(dead.values())


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--config", default=os.path.join(HERE, "..", "tuned_examples",
                                                    "impala-pong.yaml"))
    p.add_argument("--updates", type=int, default=200)
    p.add_argument("--batches", type=int, default=56, help="training batches of 500 rows")
    p.add_argument("--held-out", type=int, default=8)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--quick", action="store_true",
                   help="smoke run: 10 updates on 2 batches (not a measurement)")
    args, _ = p.parse_known_args(argv)  # run_all.sh's other harness options are ignored
    if args.quick:
        args.updates, args.batches, args.held_out = 10, 2, 1

    import numpy as np

    from flowrl.experiment import load_spec

    spec = load_spec(args.config)
    # the probe compares model inputs and clipping: start every variant from the
    # example's settings with those fields at flowrl's defaults
    spec["config"].pop("grad_clip", None)
    spec["config"]["model"] = {k: v for k, v in spec["config"].get("model", {}).items()
                               if k not in ("orthogonal_init", "zero_mean")}
    sampler = build(spec, {}, args.seed)
    try:
        worker = sampler.workers.remote_workers()[0]
        batches = [worker.sample() for _ in range(args.batches + args.held_out)]
    finally:
        sampler.stop()
    train, held = batches[:args.batches], batches[args.batches:]
    rows: dict[str, list[dict]] = {}
    for name, variant in VARIANTS.items():
        algo = build(spec, variant, args.seed)
        policy = algo.workers.local_worker().get_policy()
        curve = []
        started = time.perf_counter()
        try:
            for update in range(args.updates + 1):
                if update % 50 == 0 or update == args.updates:
                    measured = [probe(policy, b) for b in held]
                    curve.append({"updates": update,
                                  "ev": float(np.mean([m[0] for m in measured])),
                                  "value_std": float(np.mean([m[1] for m in measured])),
                                  "dead": [round(x, 3) for x in measured[0][2]]})
                    c = curve[-1]
                    print(f"{name:34s} updates={update:4d} ev={c['ev']:6.3f} "
                          f"value_std={c['value_std']:.4f} dead={c['dead']} "
                          f"({time.perf_counter() - started:.0f} s)", flush=True)
                if update < args.updates:
                    policy.learn_on_batch(train[update % len(train)])
        finally:
            algo.stop()
        rows[name] = curve
    out = {"config": os.path.relpath(args.config, HERE), "seed": args.seed,
           "updates": args.updates, "train_rows": sum(b.count for b in train),
           "held_out_rows": sum(b.count for b in held), "variants": rows}
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    folder = os.path.join(HERE, "results", *(["smoke"] if args.quick else []))
    os.makedirs(folder, exist_ok=True)
    path = os.path.join(folder, f"impala_value_probe-{stamp}.json")
    with open(path, "w") as f:
        json.dump(out, f, indent=1)
    print(f"saved: {path}")


if __name__ == "__main__":
    main()
