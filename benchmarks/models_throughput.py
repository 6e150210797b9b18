"""Sampling and learning with the catalog's MLP, CNN and LSTM: flowrl against plain torch loops.

Per model, at equal batch, model class and initial weights (both build it with
:func:`flowrl.models.get_model` from the same config and seed):

- ``mlp``: CartPole-v1, 64x64 tanh MLP (separate policy and value networks);
- ``cnn``: :func:`synthetic_frames` (uint8 ``(4, 84, 84)`` frames from a
  preallocated pool, ``Discrete(6)``, episodes of 100-500 steps: the env costs
  almost nothing, the model dominates), the default Nature CNN for 84x84 (with a
  second copy of the conv stack for the value, as ``vf_share_layers=False``);
- ``lstm``: flowrl/StatelessCartPole-v1, ``use_lstm`` over the 64x64 MLP,
  ``--lstm-cell`` units, ``max_seq_len`` 20.

Systems, ``raw-<model>`` and ``flowrl-<model>``; each measures two things:

- sampling, env steps/s. ``flowrl``: ``RolloutWorker(env, policy=PPOPolicy,
  policy_config={"model": ...}, num_envs=N, rollout_fragment_length=T).sample()``
  (the MLP acts through numpy, flowrl's default; it also stores next observations,
  tracks episodes and bootstraps truncated ones). ``raw``: a loop written here
  with gymnasium's ``SyncVectorEnv`` (``SAME_STEP`` autoreset): one batched forward
  per step under ``torch.inference_mode``, a categorical sample, obs / actions /
  rewards / dones / log-probs / values (and the LSTM's state before each step)
  stored in preallocated ``(T, N)`` buffers, the LSTM's ``(h, c)`` carried per env
  and zeroed at episode starts, GAE(0.99, 0.95) at the end of each segment;
- learning, rows trained/s. Both train on the SAME batches (flowrl samples them
  with the same seed, before timing): ``flowrl``: ``policy.learn_on_batch(batch)``;
  ``raw``: a plain loop over the batch's columns as tensors with the same PPO
  loss terms (clipped surrogate, KL penalty, clipped value loss, entropy bonus),
  Adam, global-norm gradient clipping, the same epochs and minibatch count
  (recurrent: minibatches of whole sequences, ``128 // max_seq_len`` each).
  flowrl cuts a recurrent batch into padded sequences inside ``learn_on_batch``,
  so the raw loop cuts and pads (numpy) inside its timed region too.

Both systems use ``fused=True`` Adam (flowrl's :func:`~flowrl.policies.torch_policy.make_adam`
does; a public flag), so the ratio shows flowrl's overhead, not an optimizer
choice. One torch thread per process, as ``sampling.py``: both systems run the
same maths, which more threads would speed up alike; one thread keeps the
figures per core and steady on a 2-core machine (two threads per process crawl
as soon as anything else runs: they contend for the cores).

One repetition is ``segments`` sample() calls (``N * T`` env steps each), then
``segments`` learning calls, each on one such batch, after one warm-up of each.
Each system runs in its own process per seed (``benchmarks/harness.py``),
``--reps`` repetitions; reported: medians, and flowrl / raw per model (targets:
sampling >= 0.9x, learning >= 0.95x).

    python benchmarks/models_throughput.py
    python benchmarks/models_throughput.py --quick --no-idle-wait
    python benchmarks/models_throughput.py --models cnn --interleaved
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import os
import statistics
import sys
import time
from dataclasses import dataclass, field
from typing import Callable

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from training import plain_batch  # noqa: E402  (stdlib at import)

MODELS = ["mlp", "cnn", "lstm"]
IMPLS = ["raw", "flowrl"]
KEYS = ["sample_steps_per_s", "learn_rows_per_s"]
TARGETS = {"sample_steps_per_s": 0.9, "learn_rows_per_s": 0.95}
#: PPO settings both systems use (PPOPolicy's keyword names).
PPO = dict(lr=3e-4, gamma=0.99, lambda_=0.95, clip_param=0.2, vf_clip_param=10.0,
           vf_loss_coeff=0.5, entropy_coeff=0.01, kl_coeff=0.2, grad_clip=0.5,
           num_sgd_iter=2, sgd_minibatch_size=128)


@dataclass(frozen=True)
class Setup:
    """One model's workload: env (an id or an ``env(env_config)`` creator), model
    config, ``num_envs`` x ``fragment`` steps per batch, ``segments`` batches per
    repetition."""

    model: str
    env: object
    model_config: dict = field(default_factory=dict)
    num_envs: int = 8
    fragment: int = 256
    segments: int = 5

    @property
    def recurrent(self) -> bool:
        return bool(self.model_config.get("use_lstm"))

    @property
    def batch_rows(self) -> int:
        return self.num_envs * self.fragment


def synthetic_frames(env_config: dict | None = None):
    """An Atari-shaped env that costs almost nothing: uint8 ``(4, 84, 84)`` frames
    cycled from a pool drawn at the first reset, ``Discrete(6)``, reward 1 every
    7th step, episodes of 100-500 steps (drawn per episode). Takes an
    ``env_config`` so RolloutWorker can call it as an env creator."""
    import gymnasium as gym
    import numpy as np

    class Frames(gym.Env):
        pool_size = 16

        def __init__(self):
            self.observation_space = gym.spaces.Box(0, 255, (4, 84, 84), np.uint8)
            self.action_space = gym.spaces.Discrete(6)
            self._pool = None
            self._t = self._length = 0

        def reset(self, *, seed=None, options=None):
            super().reset(seed=seed)
            if self._pool is None:
                self._pool = self.np_random.integers(0, 256, (self.pool_size, 4, 84, 84),
                                                     dtype=np.uint8)
            self._t, self._length = 0, int(self.np_random.integers(100, 501))
            return self._pool[0], {}

        def step(self, action):
            self._t += 1
            obs = self._pool[self._t % self.pool_size]
            return obs, float(self._t % 7 == 0), self._t >= self._length, False, {}

    return Frames()


def setups(quick: bool = False, lstm_cell: int = 256, num_envs: int | None = None,
           fragment: int | None = None, segments: int | None = None) -> dict[str, Setup]:
    """Each model's :class:`Setup` (``--quick``: tiny); given sizes override all."""
    lstm = {"use_lstm": True, "lstm_cell_size": lstm_cell, "max_seq_len": 20}
    mlp = {"fcnet_hiddens": [64, 64], "fcnet_activation": "tanh"}
    if quick:
        out = [Setup("mlp", "CartPole-v1", mlp, 4, 64, 1),
               Setup("cnn", synthetic_frames, {}, 2, 16, 1),
               Setup("lstm", "flowrl/StatelessCartPole-v1", lstm, 4, 64, 1)]
    else:
        out = [Setup("mlp", "CartPole-v1", mlp, 8, 256, 5),
               Setup("cnn", synthetic_frames, {}, 8, 64, 1),
               Setup("lstm", "flowrl/StatelessCartPole-v1", lstm, 8, 256, 5)]
    over = {k: v for k, v in (("num_envs", num_envs), ("fragment", fragment),
                              ("segments", segments)) if v is not None}
    return {s.model: dataclasses.replace(s, **over) for s in out}


def _env_creator(setup: Setup):
    import gymnasium as gym
    if isinstance(setup.env, str):
        from flowrl.envs import ensure_registered
        ensure_registered(setup.env)
        return lambda: gym.make(setup.env)
    return lambda: setup.env({})


def build_model(setup: Setup, obs_space, action_space, seed: int):
    """The catalog's model for ``setup`` with the weights a flowrl policy seeded with
    ``seed`` starts from (it builds its model right after ``torch.manual_seed(seed)``)."""
    import torch

    from flowrl.models import get_model
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return get_model(obs_space, action_space, int(action_space.n), setup.model_config)


# -- sampling -------------------------------------------------------------------------
def raw_sampler(setup: Setup, seed: int):
    """A generator of segments: each ``next()`` samples ``num_envs * fragment`` env
    steps with plain gymnasium and torch (see the module docstring)."""
    import gymnasium as gym
    import numpy as np
    import torch

    venv = gym.vector.SyncVectorEnv([_env_creator(setup)] * setup.num_envs,
                                    autoreset_mode=gym.vector.AutoresetMode.SAME_STEP)
    model = build_model(setup, venv.single_observation_space, venv.single_action_space, seed)
    gen = torch.Generator().manual_seed(seed)
    obs, _ = venv.reset(seed=seed)
    T, N = setup.fragment, setup.num_envs
    image = obs.dtype == np.uint8
    obs_buf = np.empty((T, *obs.shape), obs.dtype)
    act_buf = np.empty((T, N), np.int64)
    rew_buf = np.empty((T, N), np.float32)
    done_buf = np.empty((T, N), bool)
    logp_buf = np.empty((T, N), np.float32)
    val_buf = np.empty((T, N), np.float32)
    recurrent = setup.recurrent
    h = c = None
    if recurrent:
        cell = setup.model_config["lstm_cell_size"]
        h_buf, c_buf = np.empty((T, N, cell), np.float32), np.empty((T, N, cell), np.float32)
        h, c = torch.zeros(N, cell), torch.zeros(N, cell)
        ones = torch.ones(N, dtype=torch.int64)
    starts = np.ones(N, bool)  # which envs begin an episode at this step
    gamma, lam = PPO["gamma"], PPO["lambda_"]

    def forward(x, h=None, c=None):
        """``(logits, values, None)``; for the LSTM ``(logits, values, (h, c, h', c'))``:
        the state the step starts from (zeroed where an episode starts) and after it."""
        inputs = {"obs": x} if image else {"obs": x, "obs_flat": x}
        if not recurrent:
            logits, _ = model(inputs, [], None)
            return logits, model.value_function(), None
        if starts.any():
            keep = torch.as_tensor(~starts).unsqueeze(1)
            h, c = h * keep, c * keep
        logits, state = model(inputs, [h, c], ones)
        return logits, model.value_function(), (h, c, *state)

    while True:
        for t in range(T):
            with torch.inference_mode():
                logits, v, state = forward(torch.as_tensor(obs), h, c)
                logp_all = torch.log_softmax(logits, -1)
                a = torch.multinomial(logp_all.exp(), 1, generator=gen)
                logp = logp_all.gather(-1, a).squeeze(-1)
            if recurrent:  # the state this step started from; the next one's
                h_buf[t], c_buf[t] = state[0].numpy(), state[1].numpy()
                h, c = state[2], state[3]
            actions = a.squeeze(-1).numpy()
            obs_buf[t] = obs
            obs, rew, term, trunc, _ = venv.step(actions)
            starts = term | trunc
            act_buf[t], rew_buf[t], done_buf[t] = actions, rew, starts
            logp_buf[t], val_buf[t] = logp.numpy(), v.numpy()
        with torch.inference_mode():
            last_v = forward(torch.as_tensor(obs), h, c)[1].numpy()
        out = plain_batch(obs_buf, act_buf, rew_buf, done_buf, logp_buf, val_buf, last_v,
                          gamma=gamma, lam=lam)
        if recurrent:
            out.update(h=h_buf.copy(), c=c_buf.copy())
        yield out


def flowrl_worker(setup: Setup, seed: int):
    from flowrl.policies import PPOPolicy
    from flowrl.workers import RolloutWorker
    return RolloutWorker(setup.env, policy=PPOPolicy, num_envs=setup.num_envs,
                         rollout_fragment_length=setup.fragment, seed=seed,
                         policy_config={"model": setup.model_config, **PPO})


def flowrl_sampler(setup: Setup, seed: int):
    worker = flowrl_worker(setup, seed)
    try:
        while True:
            yield worker.sample()
    finally:
        worker.stop()


# -- learning -------------------------------------------------------------------------
#: The batch columns the raw learner reads (SampleBatch names), plus ``dones``.
RAW_COLUMNS = ["obs", "actions", "action_logp", "action_dist_inputs", "advantages",
               "value_targets", "vf_preds"]


def raw_columns(batch, setup: Setup) -> dict:
    """What a plain loop holds after sampling ``batch``: its columns as numpy arrays
    (env-major rows, ``num_envs`` runs of ``fragment`` steps) and, for the LSTM, the
    dones and the state before each step."""
    import numpy as np
    cols = {k: np.asarray(batch[k]) for k in RAW_COLUMNS}
    if setup.recurrent:
        cols["dones"] = np.asarray(batch["terminateds"]) | np.asarray(batch["truncateds"])
        cols["h"], cols["c"] = np.asarray(batch["state_in_0"]), np.asarray(batch["state_in_1"])
    return cols


def cut_and_pad(cols: dict, num_envs: int, fragment: int, max_seq_len: int):
    """``(starts, seq_lens, padded)``: sequences of at most ``max_seq_len`` steps that
    start at each env's first row, after every done row and every ``max_seq_len``
    steps of one episode; ``padded`` holds each step column as ``(B, L, ...)`` (L
    the longest sequence; zeros past each length), ``h``/``c`` at each start, and
    ``mask`` ``(B, L)``."""
    import numpy as np
    dones = cols["dones"].reshape(num_envs, fragment)
    run_start = np.ones_like(dones)
    run_start[:, 1:] = dones[:, :-1]
    t = np.broadcast_to(np.arange(fragment), dones.shape)
    since = t - np.maximum.accumulate(np.where(run_start, t, 0), axis=1)
    starts = np.flatnonzero(since % max_seq_len == 0)
    lens = np.diff(np.append(starts, num_envs * fragment))
    steps = int(lens.max())
    mask = np.arange(steps)[None, :] < lens[:, None]
    index = np.where(mask, starts[:, None] + np.arange(steps)[None, :], 0)
    padded = {"mask": mask, "h": cols["h"][starts], "c": cols["c"][starts]}
    for k in RAW_COLUMNS:
        v = cols[k][index]
        v[~mask] = 0
        padded[k] = v
    return starts, lens, padded


class RawLearner:
    """PPO minibatch SGD written plainly with torch on a :func:`build_model` model."""

    def __init__(self, setup: Setup, obs_space, action_space, seed: int):
        import numpy as np
        import torch
        self.setup = setup
        self.model = build_model(setup, obs_space, action_space, seed)
        self.params = list(self.model.parameters())
        self.opt = torch.optim.Adam(self.params, lr=PPO["lr"], fused=True)
        self.rng = np.random.default_rng(seed)
        self.image = len(obs_space.shape) == 3

    def loss(self, logits, values, mb, mask=None):
        import torch
        logp_all = torch.log_softmax(logits, -1)
        old_all = torch.log_softmax(mb["action_dist_inputs"], -1)
        logp = logp_all.gather(-1, mb["actions"].long().unsqueeze(-1)).squeeze(-1)
        ratio = torch.exp(logp - mb["action_logp"])
        adv = mb["advantages"]
        eps = PPO["clip_param"]
        surrogate = torch.min(adv * ratio, adv * ratio.clamp(1 - eps, 1 + eps))
        kl = (old_all.exp() * (old_all - logp_all)).sum(-1)
        entropy = -(logp_all.exp() * logp_all).sum(-1)
        old_v, targets = mb["vf_preds"], mb["value_targets"]
        clipped = old_v + (values - old_v).clamp(-PPO["vf_clip_param"], PPO["vf_clip_param"])
        vf_loss = torch.max((values - targets).pow(2), (clipped - targets).pow(2))
        per_row = (-surrogate + PPO["kl_coeff"] * kl + PPO["vf_loss_coeff"] * vf_loss
                   - PPO["entropy_coeff"] * entropy)
        return per_row.mean() if mask is None else per_row[mask].mean()

    def step(self, loss) -> None:
        import torch
        self.opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(self.params, PPO["grad_clip"])
        self.opt.step()

    def learn(self, cols: dict) -> int:
        """``num_sgd_iter`` epochs over shuffled minibatches of ``cols`` (from
        :func:`raw_columns`); returns the rows trained on."""
        import torch
        rows = len(cols["actions"])
        if self.setup.recurrent:
            self._learn_sequences(cols)
            return rows
        data = {k: torch.as_tensor(v) for k, v in cols.items()}
        size = PPO["sgd_minibatch_size"]
        for _ in range(PPO["num_sgd_iter"]):
            perm = torch.as_tensor(self.rng.permutation(rows))
            for i in range(0, rows, size):
                mb = {k: v[perm[i:i + size]] for k, v in data.items()}
                obs = mb["obs"] if self.image else mb["obs"].reshape(len(mb["obs"]), -1)
                logits, _ = self.model({"obs": obs, "obs_flat": obs}, [], None)
                self.step(self.loss(logits, self.model.value_function(), mb))
        return rows

    def _learn_sequences(self, cols: dict) -> None:
        import torch
        seq_len = self.setup.model_config["max_seq_len"]
        _, lens, padded = cut_and_pad(cols, self.setup.num_envs, self.setup.fragment, seq_len)
        data = {k: torch.as_tensor(v) for k, v in padded.items()}
        data["seq_lens"] = torch.as_tensor(lens)
        size = max(1, PPO["sgd_minibatch_size"] // seq_len)  # whole sequences
        n = len(lens)
        for _ in range(PPO["num_sgd_iter"]):
            perm = torch.as_tensor(self.rng.permutation(n))
            for i in range(0, n, size):
                mb = {k: v[perm[i:i + size]] for k, v in data.items()}
                flat = {k: v.reshape(-1, *v.shape[2:]) for k, v in mb.items()
                        if k not in ("h", "c", "seq_lens")}
                obs = flat["obs"].reshape(len(flat["obs"]), -1)
                logits, _ = self.model({"obs": obs, "obs_flat": obs}, [mb["h"], mb["c"]],
                                       mb["seq_lens"])
                self.step(self.loss(logits, self.model.value_function(), flat, flat["mask"]))


def make_learner(system: str, setup: Setup, seed: int):
    """``(learn, items)``: ``learn(item) -> rows trained`` and the items to cycle over:
    batches flowrl sampled with ``seed`` (the same for both systems, sampled here,
    before any timing), or the raw loop's columns of them."""
    worker = flowrl_worker(setup, seed)
    batches = [worker.sample() for _ in range(min(2, setup.segments))]
    policy = worker.get_policy()
    if system.startswith("flowrl-"):
        def learn(batch) -> int:
            policy.learn_on_batch(batch)
            return batch.count
        return learn, batches
    worker.stop()
    learner = RawLearner(setup, policy.observation_space, policy.action_space, seed)
    return learner.learn, [raw_columns(b, setup) for b in batches]


def make_sampler(system: str, setup: Setup, seed: int):
    impl = system.split("-")[0]
    return raw_sampler(setup, seed) if impl == "raw" else flowrl_sampler(setup, seed)


def repetitions(system: str, setup: Setup, seed: int) -> tuple[dict, Callable]:
    """``({"sample": rep, "learn": rep}, close)``: each rep does one repetition
    (``segments`` batches, after one warm-up call made here) and returns the env
    steps or rows it did."""
    gen = make_sampler(system, setup, seed)
    next(gen)  # warm-up: buffers, torch kernels
    learn, items = make_learner(system, setup, seed)
    learn(items[0])  # warm-up: optimizer state, autograd
    k = [0]

    def sample_rep() -> int:
        for _ in range(setup.segments):
            next(gen)
        return setup.segments * setup.batch_rows

    def learn_rep() -> int:
        rows = 0
        for _ in range(setup.segments):
            rows += learn(items[k[0] % len(items)])
            k[0] += 1
        return rows
    return {"sample": sample_rep, "learn": learn_rep}, gen.close


def measure(system: str, setup: Setup, seed: int, reps: int) -> dict:
    """Wall-clock rates of ``system``: ``sample_steps_per_s`` and ``learn_rows_per_s``
    (medians of ``reps`` repetitions) with the per-repetition lists."""
    fns, close = repetitions(system, setup, seed)
    out = {}
    try:
        for what, key in (("sample", "sample_steps_per_s"), ("learn", "learn_rows_per_s")):
            rates = []
            for _ in range(reps):
                start = time.perf_counter()
                units = fns[what]()
                rates.append(units / (time.perf_counter() - start))
            out[key], out[f"{what}_rates"] = statistics.median(rates), rates
    finally:
        close()
    out.update(batch_rows=setup.batch_rows, segments=setup.segments)
    return out


# -- reporting ------------------------------------------------------------------------
def _fmt_ratio(x: float, target: float) -> str:
    return "-" if math.isnan(x) else f"{x:.2f}x {'ok' if x >= target else 'BELOW'}"


def report(runs: list[dict], models, sizes: dict[str, Setup], title: str = "") -> dict:
    """Print the rates table and flowrl / raw per model; returns ``{model: {key: ratio}}``."""
    groups = {g.system: g for g in harness.summarize(runs, KEYS)}
    rows = []
    for m in models:
        for impl in IMPLS:
            g = groups.get(f"{impl}-{m}")
            f = g.figures.get if g else (lambda k: None)
            rows.append([f"{impl}-{m}", g.label if g else "0 runs",
                         harness.fmt_figure(f("sample_steps_per_s"), "{:,.0f}"),
                         harness.fmt_figure(f("learn_rows_per_s"), "{:,.0f}")])
    harness.print_table(["system", "runs", "sampling env steps/s", "learning rows/s"], rows,
                        title=title or "median [min-max] over runs")
    ratios, rows = {}, []
    for m in models:
        def fig(impl, key):
            g = groups.get(f"{impl}-{m}")
            return g.figures.get(key) if g else None
        ratios[m] = {k: harness.ratio(fig("flowrl", k), fig("raw", k)) for k in KEYS}
        s = sizes[m]
        rows.append([m, f"{s.num_envs} x {s.fragment}",
                     _fmt_ratio(ratios[m]["sample_steps_per_s"], TARGETS["sample_steps_per_s"]),
                     _fmt_ratio(ratios[m]["learn_rows_per_s"], TARGETS["learn_rows_per_s"])])
    harness.print_table(["model", "envs x steps", "sampling flowrl/raw", "learning flowrl/raw"],
                        rows, title=f"ratio of medians (targets: sampling >= "
                                    f"{TARGETS['sample_steps_per_s']}x, learning >= "
                                    f"{TARGETS['learn_rows_per_s']}x)")
    return ratios


# -- entry points ---------------------------------------------------------------------
def _sizes(args) -> dict[str, Setup]:
    return setups(args.quick, args.lstm_cell, args.num_envs, args.fragment, args.segments)


def child(args) -> None:
    import torch
    torch.set_num_threads(1)
    setup = _sizes(args)[args.child.split("-", 1)[1]]
    harness.write_result(measure(args.child, setup, args.seed, args.reps))


def interleaved(args) -> None:
    """Every model's two systems in THIS process, repetitions interleaved, rates in CPU
    time (:func:`harness.interleaved_cpu_rates`): for A/B on a loaded machine."""
    import torch
    torch.set_num_threads(1)
    sizes = _sizes(args)
    for m in args.models:
        fns, closes = {}, []
        for impl in IMPLS:
            reps, close = repetitions(f"{impl}-{m}", sizes[m], args.seed)
            closes.append(close)
            for what, fn in reps.items():
                fns[f"{impl}-{m} {what}"] = fn
        try:
            rates = harness.interleaved_cpu_rates(fns, args.reps)
        finally:
            for close in closes:
                close()
        print(f"\n{m}: in one process, CPU time, {args.reps} interleaved repetitions")
        med = harness.print_interleaved(rates, "steps")
        for what in ("sample", "learn"):
            print(f"{m} {what} flowrl / raw: "
                  f"{med[f'flowrl-{m} {what}'] / med[f'raw-{m} {what}']:.2f}x")


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--models", nargs="*", default=MODELS, choices=MODELS)
    p.add_argument("--interleaved", action="store_true",
                   help="run each model's systems in this one process, interleaved, in CPU "
                        "time (A/B on a loaded machine; not the harness's isolated runs)")
    p.add_argument("--lstm-cell", type=int, default=256, help="LSTM units (lstm_cell_size)")
    p.add_argument("--num-envs", type=int, default=None, help="override every model's")
    p.add_argument("--fragment", type=int, default=None, help="override every model's")
    p.add_argument("--segments", type=int, default=None,
                   help="batches per repetition, sampled and learned (override every model's)")
    p.add_argument("--reps", type=int, default=5, help="repetitions per process")
    harness.add_arguments(p, default_seeds=3)
    args = p.parse_args(argv)
    harness.shorten_for_quick(args, reps=1)
    if args.child:
        child(args)
        return
    if args.interleaved:
        interleaved(args)
        return
    child_args = harness.forward(args, "lstm_cell", "reps", "num_envs", "fragment", "segments",
                                 "quick")
    systems = [f"{impl}-{m}" for m in args.models for impl in IMPLS]
    runs, _ = harness.run(args, "models_throughput", __file__, systems, child_args,
                          meta=vars(args) | {"results_dir": None})
    report(runs, args.models, _sizes(args),
           title="env steps/s sampled and rows/s trained, median [min-max] over runs "
                 f"({args.reps} repetitions each; LSTM of {args.lstm_cell} units)")


if __name__ == "__main__":
    main()
