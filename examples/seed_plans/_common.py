"""Shared by the seed-plan examples: a command-line runner and a sampled-steps counter."""

from __future__ import annotations

import argparse

from flowrl.metrics import AGENT_STEPS_SAMPLED_COUNTER, STEPS_SAMPLED_COUNTER, get_metrics


def count_sampled(count: int) -> None:
    """Driver-side: add ``count`` env steps sampled elsewhere (results use them)."""
    metrics = get_metrics()
    metrics.counters[STEPS_SAMPLED_COUNTER] += count
    metrics.counters[AGENT_STEPS_SAMPLED_COUNTER] += count


def run(algo_cls, config_cls, doc: str, argv=None, **fields) -> list[dict]:
    """Build ``algo_cls`` from ``fields`` (plus ``--backend``) and train ``--iters`` times."""
    p = argparse.ArgumentParser(description=doc.splitlines()[0])
    p.add_argument("--backend", default="local", choices=["local", "ray"])
    p.add_argument("--iters", type=int, default=5)
    args = p.parse_args(argv)
    results = []
    with algo_cls(config_cls(backend=args.backend, **fields)) as algo:
        for _ in range(args.iters):
            r = algo.train()
            results.append(r)
            print(f"{algo.name}: iter {r['training_iteration']}, steps {r['timesteps_total']}, "
                  f"reward {r['episode_reward_mean']:.1f}")
    return results
