"""A learner thread fed through queues: sampling and learning overlap.

The plan samples from two rollout workers asynchronously and puts each batch
into ``inqueue`` (``flowrl.ops.Enqueue``). A plain ``threading.Thread`` takes
batches from that queue, trains the driver's policy on them and puts
``(env_steps, learner_stats)`` into ``outqueue``. The plan reads that queue
(``flowrl.ops.Dequeue``), broadcasts the new weights to the workers and reports.
``Concurrently(mode="async")`` drives both halves; only the learner half's items
are emitted. A full inqueue holds the samplers back (backpressure); a dead
learner thread fails the run (``Dequeue(check=thread.is_alive)``) instead of
hanging it.

    python examples/learner_thread.py [--iters N]
"""

from __future__ import annotations

import argparse
import os
import queue
import threading

import flowrl
from flowrl.algorithms import A2C, A2CConfig
from flowrl.metrics import STEPS_TRAINED_COUNTER
from flowrl.ops import Dequeue, Enqueue, ParallelRollouts, StandardMetricsReporting
from flowrl.policies import A2CPolicy
from flowrl.workers import WorkerSet


class Learner(threading.Thread):
    """Trains ``worker``'s policy on every batch from ``inqueue`` until stopped."""

    def __init__(self, worker, lock: threading.Lock):
        super().__init__(name="learner", daemon=True)
        self.worker, self.lock = worker, lock
        self.inqueue: queue.Queue = queue.Queue(maxsize=4)
        self.outqueue: queue.Queue = queue.Queue(maxsize=4)   # bounded: no runaway
        self.stopped = threading.Event()

    def run(self) -> None:
        while not self.stopped.is_set():
            try:
                batch = self.inqueue.get(timeout=0.1)
            except queue.Empty:
                continue
            with self.lock:                    # no weight read in the middle of an update
                stats = self.worker.learn_on_batch(batch)
            while not self.stopped.is_set():  # wait for the plan to take results
                try:
                    self.outqueue.put((batch.count, stats), timeout=0.1)
                    break
                except queue.Full:
                    continue


def build_plan(workers: WorkerSet, learner: Learner, lock: threading.Lock) -> flowrl.Plan:
    # Half 1: async rollouts into the learner's inqueue (counts env steps sampled).
    enqueue_op = ParallelRollouts(workers, mode="async").for_each(Enqueue(learner.inqueue))

    # Half 2: what the learner finished; broadcast weights, count, report.
    def after_learning(item):
        count, stats = item
        with lock:
            workers.sync_weights()
        metrics = flowrl.get_metrics()
        metrics.counters[STEPS_TRAINED_COUNTER] += count
        metrics.info["learner"] = stats
        return item

    dequeue_op = (Dequeue(learner.outqueue, check=learner.is_alive, name="learner_out")
                  .for_each(after_learning, name="broadcast"))
    both = flowrl.Concurrently([enqueue_op, dequeue_op], mode="async", output_indexes=[1])
    return flowrl.Plan(StandardMetricsReporting(both, workers, timesteps_per_iteration=400),
                       name="learner_thread")


def main(argv=None) -> list:
    small = os.environ.get("CI") == "true"
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--iters", type=int, default=3 if small else 40)
    args = p.parse_args(argv)
    config = A2CConfig(env="CartPole-v1", num_workers=2, num_envs_per_worker=4,
                       rollout_fragment_length=25, seed=0)
    workers = WorkerSet(config.env, A2CPolicy, A2C.worker_config(config),
                        num_workers=config.num_workers, backend="local")
    lock = threading.Lock()
    learner = Learner(workers.local_worker(), lock)
    learner.start()
    results = []
    try:
        with build_plan(workers, learner, lock).compile(seed=0) as run:
            for _ in range(args.iters):
                r = next(run)
                results.append(r)
                print(f"iter {r['training_iteration']:3d}  sampled {r['timesteps_total']:6d}  "
                      f"trained {r['info']['num_steps_trained']:6d}  "
                      f"mean return {r['episode_reward_mean']:6.1f}")
    finally:
        learner.stopped.set()
        learner.join(timeout=30)
        workers.stop()
    return results


if __name__ == "__main__":
    main()
