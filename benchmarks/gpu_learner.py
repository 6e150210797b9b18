"""The GPU learner path (``num_gpus=1``) on Pong: checks, then the learner's rows/s on
CUDA against the CPU. A short, prepared check for a machine with a GPU, never in CI.

1. IMPALA (``tuned_examples/impala-pong.yaml``, embedded backend, its learner thread
   and loader) and PPO (``ppo-pong.yaml``, ``MultiGPUTrainOneStep``), each with
   ``num_gpus=1`` (``--num-gpus``), train ``--iters`` iterations. Checked for each:
   - the learner trains on a tower on CUDA (``cuda``; without CUDA this check is
     reported skipped and the rest runs on one CPU tower, the same code);
   - every batch the learner loads reaches the tower's device once, its
     observations as uint8 (the model converts them to float there);
   - the losses are finite and the weights moved;
   - after the run the learner's weights, its tower's and the rollout workers' agree.
2. Timing: IMPALA's learner step (``sgd_step``) on a loaded 500-row Pong batch,
   ``--steps`` times, on the CPU (one tower, ``torch_threads`` threads) and on CUDA.

Prints one line per check (``ok``, ``FAILED`` or ``skipped``) and the timing,
writes both to ``--out`` (JSON) and exits 1 if a check failed. About 2 minutes on a
CPU. The embedded backend needs no Ray, so a GPU machine with torch, numpy, OpenCV,
networkx, cloudpickle, PyYAML, rich and safetensors needs only the wheels of
gymnasium, Farama-Notifications, ale-py and pydot more (about 4 MB; for Python 3.12
they are fetched with ``pip download --no-deps --only-binary=:all: --python-version
3.12 --platform manylinux_2_28_x86_64 -d .whl ...``), installed there with
``pip install --no-index --no-deps --target /tmp/site .whl/*.whl``:

    python benchmarks/gpu_learner.py                       # here: CPU towers only
    python benchmarks/gpu_learner.py --num-gpus 2          # two CPU tower copies, as CUDA's
    PYTHONPATH=.:/tmp/site python3 benchmarks/gpu_learner.py --out $OUT/gpu_learner.json
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

CHECKS: list[dict] = []


def check(name: str, ok: bool | None, detail: str = "") -> None:
    """Record and print one check: True ok, False failed, None skipped."""
    status = {True: "ok", False: "FAILED", None: "skipped"}[ok]
    CHECKS.append({"check": name, "status": status, "detail": detail})
    print(f"[{status}] {name}{': ' + detail if detail else ''}", flush=True)


def build(algo_name: str, num_gpus: float, seed: int, **overrides):
    """The algorithm of ``tuned_examples/<algo_name>-pong.yaml`` on the embedded backend."""
    from flowrl.experiment import algorithm_class, load_spec, make_config
    spec = load_spec(os.path.join(ROOT, "tuned_examples", f"{algo_name}-pong.yaml"))
    config = make_config(spec["algo"], {"env": spec["env"], **spec["config"], "seed": seed,
                                        "backend": "local", "num_gpus": num_gpus, **overrides})
    return algorithm_class(spec["algo"])(config)


def weights_of(module) -> dict:
    """A tower model's weights as numpy copies (``TorchPolicy.get_weights`` reads only
    the policy's own model)."""
    return {k: v.detach().cpu().numpy().copy() for k, v in module.state_dict().items()}


def same(a: dict, b: dict) -> bool:
    import numpy as np
    return a.keys() == b.keys() and all(np.array_equal(a[k], b[k]) for k in a)


def check_training(algo_name: str, iters: int, seed: int, cuda: bool, num_gpus: int,
                   **overrides) -> None:
    """The checks of the module docstring's first part, for one algorithm."""
    import numpy as np
    import torch
    from flowrl.batch import SampleBatch as SB
    algo = build(algo_name, num_gpus, seed, **overrides)
    try:
        policy = algo.get_policy()
        loads: list[tuple] = []
        load = policy.load_batch

        def recording_load(batch):
            loaded = load(batch)
            obs = loaded.copies[0][SB.OBS]
            loads.append((obs.device.type, obs.dtype))
            return loaded
        policy.load_batch = recording_load
        before = policy.get_weights()
        losses = []
        for _ in range(iters):
            info = algo.train()["info"]["learner"]
            losses += [s.get("total_loss", math.nan) for s in info.values()]
        devices = [d for _, d in policy.towers]  # set up by the plan's train op
        check(f"{algo_name}: the learner's tower is on CUDA",
              (devices[0].type == "cuda") if cuda else None, f"towers on {devices}")
        kinds = sorted(set(loads))
        check(f"{algo_name}: batches reach the tower's device as uint8 observations",
              bool(loads) and kinds == [(devices[0].type, torch.uint8)],
              f"{len(loads)} loads, (device, obs dtype): {kinds}")
        check(f"{algo_name}: losses finite and weights moved",
              bool(losses) and all(map(math.isfinite, losses))
              and not same(before, policy.get_weights()),
              f"{len(losses)} losses, last {losses[-1] if losses else None}")
        algo.workers.sync_weights()
        learner = policy.get_weights()
        towers = [weights_of(model) for model, _ in policy.towers]
        workers = algo.workers.foreach_worker(lambda w: w.get_policy().get_weights())
        check(f"{algo_name}: learner, tower and rollout workers hold the same weights",
              all(same(learner, t) for t in towers)
              and all(same(learner, {k: np.asarray(v) for k, v in w.items()}) for w in workers),
              f"{len(towers)} tower(s), {len(workers)} worker(s)")
    finally:
        algo.stop()


def time_learner(steps: int, seed: int, cuda: bool) -> dict:
    """IMPALA learner steps/s on one loaded 500-row batch: CPU, then CUDA."""
    import torch
    from flowrl.batch import concat_samples
    from flowrl.ops.multi_gpu import set_towers
    algo = build("impala", 0, seed)
    try:
        worker, policy = algo.workers.local_worker(), algo.get_policy()
        fragments, rows = [], 0
        while rows < algo.config.train_batch_size:
            fragments.append(worker.sample())
            rows += fragments[-1].count
        batch = concat_samples(fragments)
        out = {"rows": batch.count, "torch_threads": torch.get_num_threads()}
        for name, device in [("cpu", torch.device("cpu"))] + (
                [("cuda", torch.device("cuda"))] if cuda else []):
            set_towers(policy, [device])
            loaded = policy.load_batch(batch)
            for _ in range(3):  # warm-up: the optimizer state, cuDNN's algorithm choice
                policy.sgd_step(loaded)
            if device.type == "cuda":
                torch.cuda.synchronize()
            t = time.perf_counter()
            for _ in range(steps):
                policy.sgd_step(loaded)
            if device.type == "cuda":
                torch.cuda.synchronize()
            out[f"{name}_rows_per_s"] = steps * batch.count / (time.perf_counter() - t)
        return out
    finally:
        algo.stop()


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--iters", type=int, default=3, help="training iterations per algorithm")
    p.add_argument("--steps", type=int, default=20, help="timed learner steps per device")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--num-gpus", type=int, default=1,
                   help="towers for the training checks (2 without CUDA: two CPU copies)")
    p.add_argument("--out", default=None, help="write the checks and figures here (JSON)")
    args = p.parse_args(argv)
    import torch
    cuda = torch.cuda.is_available()
    check("CUDA is available", cuda or None,
          torch.cuda.get_device_name(0) if cuda else "no CUDA: CPU towers only")
    for algo_name in ("impala", "ppo"):
        try:
            check_training(algo_name, args.iters, args.seed, cuda, args.num_gpus)
        except Exception as e:  # noqa: BLE001 - a failed check, reported with the others
            check(f"{algo_name}: trains with num_gpus={args.num_gpus}", False,
                  f"{type(e).__name__}: {e}")
    timing = time_learner(args.steps, args.seed, cuda)
    cpu, gpu = timing["cpu_rows_per_s"], timing.get("cuda_rows_per_s", math.nan)
    versus = f"CUDA {gpu:,.0f} rows/s ({gpu / cpu:.1f}x)" if cuda else "no CUDA to compare"
    print(f"\nIMPALA learner on a {timing['rows']}-row Pong batch: CPU "
          f"({timing['torch_threads']} torch threads) {cpu:,.0f} rows/s; {versus}")
    if args.out:
        with open(args.out, "w") as f:
            json.dump({"cuda": cuda, "device": torch.cuda.get_device_name(0) if cuda else None,
                       "torch": torch.__version__, "checks": CHECKS, "timing": timing}, f,
                      indent=1)
    return 1 if any(c["status"] == "FAILED" for c in CHECKS) else 0


if __name__ == "__main__":
    sys.exit(main())
