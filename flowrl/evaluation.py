"""Evaluating a trained policy: whole episodes on a fresh env, mean and std of return.

:func:`evaluate_policy` plays ``episodes`` complete episodes with the learner's
policy on one new env built like the workers' (env id or creator plus
``env_config``), taking the distribution's mode unless ``explore=True``, and
returns the returns with their mean and (population) standard deviation. It does
not touch the training run: no counters move and no worker is used.
:func:`load_for_evaluation` rebuilds an algorithm from a checkpoint alone (the
config is stored in it), with no remote workers.

>>> from flowrl.algorithms import PG, PGConfig
>>> algo = PG(PGConfig(env="CartPole-v1", seed=0))
>>> r = evaluate_policy(algo, episodes=2, seed=0)
>>> len(r["returns"]), r["mean"] == sum(r["returns"]) / 2
(2, True)
>>> algo.stop()
"""

from __future__ import annotations

from typing import Any

import numpy as np

from flowrl.errors import ConfigError, FlowError


def evaluate_policy(algo, episodes: int, seed: int | None = None,
                    explore: bool = False, max_steps: int = 100_000) -> dict[str, Any]:
    """Play ``episodes`` episodes with ``algo``'s learner policy; returns ``returns``,
    ``lengths``, ``mean``, ``std``, ``min``, ``max``. An episode longer than
    ``max_steps`` steps is cut there (an env without a time limit cannot hang it).
    Envs are made for evaluation (Atari: whole games, raw scores); a recurrent
    policy carries its state through each episode."""
    import gymnasium as gym

    from flowrl.workers.multi_agent_env import MultiAgentEnv
    from flowrl.workers.rollout_worker import flat_observations, make_env_creator
    if isinstance(episodes, bool) or not isinstance(episodes, int) or episodes < 1:
        raise ConfigError(f"evaluate(episodes={episodes!r}): must be an int >= 1")
    local = algo.workers.local_worker()
    if len(local.policy_map) != 1:
        raise ConfigError("evaluate: the algorithm has several policies "
                          f"{sorted(local.policy_map)}; evaluation plays single-agent envs")
    policy = next(iter(local.policy_map.values()))
    env = make_env_creator(algo.config.env, dict(algo.config.env_config),
                           algo.config.preprocessor_pref, training=False)()
    if isinstance(env, MultiAgentEnv):
        raise ConfigError("evaluate: the env is multi-agent; evaluation plays single-agent envs")
    env = flat_observations(env)
    recurrent = getattr(policy, "is_recurrent", False)
    space = env.action_space
    clip = (space.low, space.high) if isinstance(space, gym.spaces.Box) else None
    returns, lengths = [], []
    try:
        for i in range(episodes):
            obs, _ = env.reset(seed=None if seed is None else seed + i)
            total, steps, done = 0.0, 0, False
            memory: dict = {}  # a recurrent policy's state, previous action and reward
            if recurrent:
                memory = {"state_batches": [s[None] for s in policy.get_initial_state()],
                          "prev_actions": None, "prev_rewards": np.zeros(1, np.float32)}
            while not done and steps < max_steps:
                actions, extra = policy.compute_actions(np.asarray(obs)[None], explore=explore,
                                                        **memory)
                action = actions[0]
                if clip is not None:
                    action = np.clip(action, *clip)
                obs, reward, terminated, truncated, _ = env.step(action)
                if recurrent:
                    memory = {"state_batches": [extra[f"state_out_{k}"]
                                                for k in range(len(memory["state_batches"]))],
                              "prev_actions": actions,
                              "prev_rewards": np.asarray([reward], np.float32)}
                total += float(reward)
                steps += 1
                done = terminated or truncated
            returns.append(total)
            lengths.append(steps)
    finally:
        env.close()
    arr = np.asarray(returns)
    return {"returns": returns, "lengths": lengths, "mean": float(arr.mean()),
            "std": float(arr.std()), "min": float(arr.min()), "max": float(arr.max())}


def load_for_evaluation(path: str, *, allow_pickle: bool = False):
    """An algorithm rebuilt from the checkpoint at ``path`` (file, checkpoint
    directory or a directory of checkpoints), local backend, no remote workers,
    with the checkpoint restored. ``allow_pickle`` lets it load the checkpoint's
    pickled parts (a config holding functions, custom extra state): only for
    checkpoints you trust. ConfigError (one line) when it cannot be."""
    from flowrl import checkpoint
    from flowrl.experiment import algorithm_class
    state = checkpoint.read_checkpoint(path, allow_pickle=allow_pickle)
    cls = algorithm_class(state.get("algorithm"))
    fields = state.get("config")
    if not isinstance(fields, dict):
        raise ConfigError(f"checkpoint {state['path']!r} holds no config (it could not be "
                          "stored when saved); rebuild the algorithm and call restore() instead")
    pickled = checkpoint.find_pickled(fields)
    if pickled is not None:
        raise ConfigError(f"checkpoint {state['path']!r}: its config field {pickled.where} "
                          f"({pickled.type_name}) was saved with pickle, and unpickling can run "
                          "any code: pass allow_pickle=True (CLI: --allow-pickle) only for a "
                          "checkpoint you trust")
    try:
        config = cls.config_class(**fields)
    except (TypeError, FlowError) as e:
        raise ConfigError(f"checkpoint {state['path']!r}: its config cannot be rebuilt here "
                          f"({type(e).__name__}: {e})") from None
    algo = cls(config.replace(num_workers=0, backend="local"))
    try:
        algo.restore(state["path"], allow_pickle=allow_pickle)
    except BaseException:
        algo.stop()
        raise
    return algo


__all__ = ["evaluate_policy", "load_for_evaluation"]
