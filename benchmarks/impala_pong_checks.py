"""Correctness checks behind IMPALA's Pong investigation (issue 43): do the workers act
with the weights they were sent, and does the learner see what they saw?

Builds IMPALA from ``tuned_examples/impala-pong.yaml`` (or ``--config``) on the local
backend with one remote worker, moves the learner's weights off their initial values,
sends them with ``sync_weights``, samples one fragment on the remote worker and then,
on the learner, with the same weights:

- the largest difference between the behaviour log-probability the worker recorded
  (``action_logp``, computed by its numpy acting path) and the learner's torch
  log-probability of the same actions (V-trace's ρ = π/μ must be 1 here);
- the same for the value estimates (``vf_preds``);
- whether the learner's rebuilt frame stacks (each row's ``obs`` shifted by one frame,
  ``new_frame`` appended, what ``IMPALAPolicy._next_values`` does) equal the next
  row's ``obs``, the stack the worker saw;
- the ``policy_version`` the rows carry against the learner's version;
- the health of the learner's network on that fragment: per ReLU layer, the share of
  its units (channel x position) that are 0 on every row ("dead"), and how much the
  values and logits vary across the rows (0: the network ignores its input). With
  ``--checkpoint`` the learner's weights come from a checkpoint of a run of this
  config (``flowrl train --config ... --checkpoint-freq N``) instead of being
  perturbed from their initial values, so a stalled run can be examined.

Prints the figures and writes them to ``benchmarks/results/impala_pong_checks-<UTC
time>.json``. Takes about half a minute; needs ale-py.

    python benchmarks/impala_pong_checks.py
"""

from __future__ import annotations

import argparse
import json
import os
import time

HERE = os.path.dirname(os.path.abspath(__file__))


def forward_with_dead_units(policy, train: dict) -> tuple:
    """``(inputs, values, logp, dead)`` of ``policy``'s model on the rows of ``train``
    (no gradient): the action distribution inputs, the values, the log-probabilities
    of the rows' actions, and per ReLU layer the share of its units (channel x
    position) that are 0 on every row."""
    import torch

    from flowrl.batch import SampleBatch as SB

    outputs: dict[str, torch.Tensor] = {}
    hooks = [m.register_forward_hook(
                 lambda _m, _i, o, name=name: outputs.__setitem__(name, o.detach()))
             for name, m in policy.model.named_modules() if isinstance(m, torch.nn.ReLU)]
    try:
        with torch.no_grad():
            inputs, values = policy.model_out(train)
            logp = policy.dist_class(inputs).logp(train[SB.ACTIONS])
    finally:
        for h in hooks:
            h.remove()
    dead = {name: float((o.reshape(len(o), -1).max(0).values <= 0).float().mean())
            for name, o in outputs.items()}
    return inputs, values, logp, dead


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--config", default=os.path.join(HERE, "..", "tuned_examples",
                                                    "impala-pong.yaml"))
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--checkpoint", default=None,
                   help="examine the weights of this checkpoint (of a run of --config)")
    # run_all.sh hands every script the harness's options (--quick, --seeds ...): this
    # one times nothing and runs once, so it takes them and ignores them
    args, _ = p.parse_known_args(argv)

    import numpy as np
    import torch

    from flowrl.algorithms import IMPALA
    from flowrl.batch import SampleBatch as SB
    from flowrl.experiment import load_spec, make_config

    spec = load_spec(args.config)
    config = make_config(spec["algo"], {"env": spec["env"], **spec["config"],
                                        "backend": "local", "num_workers": 1,
                                        "seed": args.seed, "create_env_on_driver": True})
    algo = IMPALA(config)
    try:
        local, remote = algo.workers.local_worker(), algo.workers.remote_workers()[0]
        policy = local.get_policy()
        if args.checkpoint:
            algo.restore(args.checkpoint)
        else:
            generator = torch.Generator().manual_seed(args.seed)
            with torch.no_grad():
                for param in policy.model.parameters():
                    param.add_(0.01 * torch.randn(param.shape, generator=generator))
            local.count_updates([next(iter(local.policy_map))])
            algo.workers.sync_weights()
        batch = remote.sample()
        train = policy._train_tensors(batch)
        inputs, values, logp, dead = forward_with_dead_units(policy, train)
        same_episode = batch[SB.EPS_ID][1:] == batch[SB.EPS_ID][:-1]
        obs, frames = batch[SB.OBS], batch[SB.NEXT_FRAME]
        rebuilt = np.concatenate([obs[:-1, 1:], frames[:-1, None]], axis=1)
        equal = [np.array_equal(rebuilt[i], obs[i + 1])
                 for i in np.nonzero(same_episode)[0]]
        out = {
            "config": os.path.relpath(args.config, HERE), "rows": batch.count,
            "max_abs_logp_diff": float(np.abs(logp.numpy() - batch[SB.ACTION_LOGP]).max()),
            "max_abs_value_diff": float(np.abs(values.numpy() - batch[SB.VF_PREDS]).max()),
            "rebuilt_stacks_checked": len(equal),
            "rebuilt_stacks_equal": int(sum(equal)),
            "row_versions": sorted(set(batch[SB.POLICY_VERSION].tolist())),
            "learner_version": local.policy_versions[next(iter(local.policy_map))],
            "checkpoint": args.checkpoint,
            "dead_relu_units": dead,
            "value_std_across_rows": float(values.std()),
            "logits_std_across_rows": float(inputs.std(0).mean()),
        }
    finally:
        algo.stop()
    for k, v in out.items():
        print(f"{k}: {v}")
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    path = os.path.join(HERE, "results", f"impala_pong_checks-{stamp}.json")
    with open(path, "w") as f:
        json.dump(out, f, indent=1)
    print(f"saved: {path}")


if __name__ == "__main__":
    main()
