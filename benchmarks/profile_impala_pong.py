"""Where an IMPALA step on Pong spends its time, per agent step, on one core.

One rollout worker of IMPALA built from ``tuned_examples/impala-pong.yaml`` (on the
in-process backend, so in this process) samples ``ALE/Pong-v5`` for ``--seconds``, timed by wrappers that
change nothing it computes:

- ``ale_us``: the ALE env's own ``step`` (4 per agent step: the emulator and its
  grayscale screen copy);
- ``preprocess_us``: the rest of each env's wrapper stack (max-pool, resize,
  episodic life, reward clipping, frame stack, episode statistics);
- ``forward_us``: the model's forward passes (torch forward hooks): acting, and
  the value of each fragment's last observation;
- ``sampler_us``: the rest of ``sample()``: action sampling, episode tracking,
  building and postprocessing the fragment.

Then, on the fragments it sampled: ``serialize_us``, a ``ray.put`` + ``ray.get``
round trip of each (what moving a fragment from a worker to the driver costs,
without the network); ``concat_us``, concatenating them into train batches of the
example's ``train_batch_size``; and ``learn_us``, IMPALA's ``learn_on_batch`` on
those batches, per row (the learner thread's work, which runs beside sampling).

Everything is per agent step (per trained row for ``learn_us``), median
[min-max] over seeds, each in a fresh process (``benchmarks/harness.py``), one
torch thread. ``other_share`` is the part of a sampled-and-moved step that is
neither env nor model: (sampler + serialize + concat) / (all of them).

    python benchmarks/profile_impala_pong.py
    python benchmarks/profile_impala_pong.py --quick --no-idle-wait
"""

from __future__ import annotations

import argparse
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402  (stdlib only)

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SPEC = os.path.join(ROOT, "tuned_examples", "impala-pong.yaml")
SYSTEMS = ["flowrl-impala"]
PARTS = ["ale_us", "preprocess_us", "forward_us", "sampler_us", "serialize_us", "concat_us"]
KEYS = [*PARTS, "step_us", "other_share", "learn_us", "steps_per_s"]


class Clock:
    """Seconds spent inside the calls it wraps (not re-entrant: one thread)."""

    def __init__(self):
        self.total = 0.0

    def wrap(self, fn):
        def timed(*args, **kwargs):
            t = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                self.total += time.perf_counter() - t
        return timed

    def hooks(self, module) -> None:
        """Time ``module``'s forward passes with torch's forward hooks."""
        started: list[float] = []
        module.register_forward_pre_hook(lambda *_: started.append(time.perf_counter()))

        def done(*_):
            self.total += time.perf_counter() - started.pop()
        module.register_forward_hook(done)


def child(args) -> dict:
    import ray
    import torch
    torch.set_num_threads(1)

    from flowrl.algorithms import IMPALA
    from flowrl.batch import concat_samples
    from flowrl.experiment import load_spec, make_config
    spec = load_spec(SPEC)
    # The in-process backend builds the example's workers as Ray would, in this process.
    c = make_config(spec["algo"], {"env": spec["env"], **spec["config"], "seed": args.seed,
                                   "backend": "local", "num_workers": 1, "torch_threads": 1})
    algo = IMPALA(c)
    worker = algo.workers.remote_workers()[0]
    ale, stack, forward = Clock(), Clock(), Clock()
    for env in worker.envs[0].envs:  # the sync vector env's envs, each a wrapper stack
        env.unwrapped.step = ale.wrap(env.unwrapped.step)
        env.step = stack.wrap(env.step)
    forward.hooks(worker.get_policy().model)
    worker.sample()  # warm-up: first resets, lazy inits
    ale.total = stack.total = forward.total = 0.0
    fragments, steps, t = [], 0, time.perf_counter()
    while time.perf_counter() - t < args.seconds:
        batch = worker.sample()
        fragments.append(batch)
        steps += batch.count
    sample_s = time.perf_counter() - t

    ray.init(address="local", num_cpus=1, include_dashboard=False, log_to_driver=False,
             configure_logging=False)
    t = time.perf_counter()
    for batch in fragments:
        ray.get(ray.put(batch))
    serialize_s = time.perf_counter() - t
    ray.shutdown()

    per_batch = max(1, c.train_batch_size // fragments[0].count)
    groups = [fragments[i:i + per_batch] for i in range(0, len(fragments), per_batch)]
    t = time.perf_counter()
    trains = [concat_samples(g) for g in groups]
    concat_s = time.perf_counter() - t
    trains = trains[:max(1, min(len(trains), args.learn_batches))]
    policy = algo.get_policy()  # the learner's
    policy.learn_on_batch(trains[0])  # warm-up: the optimizer is built on first use
    rows, t = 0, time.perf_counter()
    for b in trains:
        policy.learn_on_batch(b)
        rows += b.count
    learn_s = time.perf_counter() - t
    algo.stop()

    us = 1e6 / steps
    parts = {"ale_us": ale.total * us, "preprocess_us": (stack.total - ale.total) * us,
             "forward_us": forward.total * us,
             "sampler_us": (sample_s - stack.total - forward.total) * us,
             "serialize_us": serialize_s * us, "concat_us": concat_s * us}
    total = sum(parts.values())
    return {**parts, "step_us": total,
            "other_share": (parts["sampler_us"] + parts["serialize_us"] + parts["concat_us"])
            / total, "learn_us": learn_s * 1e6 / rows, "steps_per_s": steps / sample_s,
            "steps": steps, "learn_rows": rows}


def report(runs: list[dict]) -> None:
    groups = harness.summarize(runs, KEYS)
    for g in groups:
        f = g.figures.get
        step = f("step_us")
        rows = [[k.removesuffix("_us"), harness.fmt_figure(f(k), "{:,.1f}"),
                 f"{f(k)[0] / step[0]:.0%}" if f(k) and step else "-"] for k in PARTS]
        rows.append(["all of the above", harness.fmt_figure(step, "{:,.1f}"), "100%"])
        rows.append(["learn (per trained row, on the learner thread)",
                     harness.fmt_figure(f("learn_us"), "{:,.1f}"), "-"])
        harness.print_table(["part", "us per agent step", "share of a step"], rows,
                            title=f"{g.system} ({g.label}), ALE/Pong-v5 with "
                                  "tuned_examples/impala-pong.yaml's model, one core: median "
                                  "[min-max] over seeds")
        share = f("other_share")
        print(f"neither env nor model (sampler + serialize + concat): "
              f"{harness.fmt_figure(share and tuple(100 * x for x in share), '{:.1f}')} % "
              f"of a step; sampling alone {harness.fmt_figure(f('steps_per_s'), '{:,.0f}')} "
              "agent steps/s")


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--seconds", type=float, default=30.0, help="sampling time per run")
    p.add_argument("--learn-batches", type=int, default=20,
                   help="train batches timed through learn_on_batch")
    harness.add_arguments(p, default_seeds=3)
    args = p.parse_args(argv)
    if args.seconds <= 0 or args.learn_batches < 1:
        p.error("--seconds must be > 0 and --learn-batches >= 1")
    harness.shorten_for_quick(args, seeds=1, seconds=3.0, learn_batches=2)
    if args.child:
        harness.write_result(child(args))
        return
    runs, _ = harness.run(args, "profile_impala_pong", __file__, SYSTEMS,
                          harness.forward(args, "seconds", "learn_batches"),
                          meta={"spec": SPEC, "seconds": args.seconds})
    report(runs)


if __name__ == "__main__":
    main()
