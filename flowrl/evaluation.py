"""Evaluating a policy outside the training loop: beside an algorithm, or from a
checkpoint (``flowrl evaluate``, ``flowrl export``).

:func:`evaluate_policy` plays whole episodes with an algorithm's learner policy
on one new env built for evaluation, with the loop the evaluation workers use
(:func:`flowrl.workers.play.play_episodes`); :func:`load_for_evaluation` rebuilds
a checkpoint's policies on one worker without the training topology;
:func:`record_video` records the episodes. Evaluation during training (the
``evaluation`` plan step, :class:`Evaluation`) is :mod:`flowrl.ops.evaluation`'s;
this module re-exports its names and the loop's.

>>> from flowrl.algorithms import PG, PGConfig
>>> algo = PG(PGConfig(env="CartPole-v1", seed=0))
>>> r = evaluate_policy(algo, episodes=2, seed=0)
>>> len(r["returns"]), r["mean"] == sum(r["returns"]) / 2
(2, True)
>>> algo.stop()
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

import gymnasium as gym
import numpy as np

from flowrl.errors import ConfigError
from flowrl.ops.evaluation import Evaluation, assign_episodes, summarize_evaluation
from flowrl.workers.play import MAX_EPISODE_STEPS, play_episodes


def evaluate_policy(algo, episodes: int, seed: int | None = None,
                    explore: bool = False, max_steps: int = MAX_EPISODE_STEPS,
                    video_dir: str | None = None) -> dict[str, Any]:
    """Play ``episodes`` episodes with ``algo``'s learner policy (``algo``: an
    algorithm, or a :class:`LoadedCheckpoint`) on one new env built
    like the workers' but for evaluation (Atari: whole games, raw scores), with
    :func:`play_episodes` (episode ``i`` resets with ``seed + i``); returns
    ``returns``, ``lengths``, ``mean``, ``std`` (population), ``min``, ``max``. An
    episode longer than ``max_steps`` steps is cut there. It does not touch the
    training run: no counters move and no worker is used.

    ``video_dir`` records every episode as ``<video_dir>/<algo>-episode-<i>.mp4``
    with gymnasium's ``RecordVideo`` (:func:`record_video`): the env is made with
    ``render_mode="rgb_array"`` (an env creator must honour the ``render_mode`` key
    of its ``env_config``). It needs moviepy (``pip install 'flowrl[video]'``); a
    ConfigError says so, and names an env that cannot render frames."""
    from flowrl.envs.multi_agent import MultiAgentEnv
    from flowrl.workers.rollout_worker import flat_observations, make_env_creator
    where = "evaluate"
    if isinstance(episodes, bool) or not isinstance(episodes, int) or episodes < 1:
        raise ConfigError(f"evaluate(episodes={episodes!r}): must be an int >= 1")
    local = algo.workers.local_worker()
    if len(local.policy_map) != 1:
        raise ConfigError("evaluate: the algorithm has several policies "
                          f"{sorted(local.policy_map)}; evaluation plays single-agent envs")
    policy = next(iter(local.policy_map.values()))
    env_config = dict(algo.config.env_config)
    if video_dir is not None:
        where = f"evaluate(video_dir={video_dir!r})"
        import_moviepy(where)
        env_config["render_mode"] = "rgb_array"
    make = make_env_creator(algo.config.env, env_config, algo.config.preprocessor_pref,
                            training=False)
    env = _make_rendering_env(make, algo.config.env, where) if video_dir is not None else make()
    try:
        if isinstance(env, MultiAgentEnv):
            raise ConfigError("evaluate: the env is multi-agent; evaluation plays "
                              "single-agent envs")
        if video_dir is not None:
            env = record_video(env, video_dir, name_prefix=algo.name, where=where)
        played = play_episodes([flat_observations(env)], policy, [list(range(episodes))],
                               explore=explore, seed=seed, max_steps=max_steps)
    except gym.error.DependencyNotInstalled as e:  # say, pygame to draw CartPole
        raise ConfigError(f"{where}: {e}") from None
    finally:
        env.close()
    returns = [e["episode_reward"] for e in played]
    arr = np.asarray(returns)
    return {"returns": returns, "lengths": [e["episode_len"] for e in played],
            "mean": float(arr.mean()), "std": float(arr.std()), "min": float(arr.min()),
            "max": float(arr.max())}


def import_moviepy(where: str) -> Any:
    """The ``moviepy`` module (gymnasium's ``RecordVideo`` writes with it); a
    ConfigError naming ``where`` and the install command when it is missing."""
    try:
        import moviepy
    except ImportError:
        raise ConfigError(f"{where}: recording videos needs moviepy: pip install "
                          "'flowrl[video]' (or pip install moviepy)") from None
    return moviepy


def _make_rendering_env(make, env_id: Any, where: str) -> Any:
    """``make()`` for an env asked for ``render_mode="rgb_array"``; a ConfigError
    naming ``where`` and the env when it cannot be made so."""
    from flowrl.workers.rollout_worker import describe_env
    try:
        return make()
    except (TypeError, ValueError, gym.error.DependencyNotInstalled) as e:
        raise ConfigError(f"{where}: env {describe_env(env_id)} cannot be made with "
                          f"render_mode='rgb_array' ({type(e).__name__}: {e}); record an env "
                          "that renders frames") from None


def record_video(env: Any, video_dir: str, *, name_prefix: str = "rl-video",
                 where: str = "record_video") -> Any:
    """``env`` wrapped in gymnasium's ``RecordVideo``, recording every episode as
    ``<video_dir>/<name_prefix>-episode-<i>.mp4`` (written when the episode ends
    or the env closes). ``env`` must have been made with
    ``render_mode="rgb_array"``; a ConfigError naming ``where`` says how to fix it
    otherwise, or when moviepy is missing."""
    from flowrl.workers.rollout_worker import describe_env
    import_moviepy(where)
    mode = getattr(env, "render_mode", None)
    if mode != "rgb_array":
        spec = getattr(env, "spec", None)
        name = describe_env(spec.id) if spec is not None else type(env).__name__
        raise ConfigError(f"{where}: env {name} renders with render_mode={mode!r}, and a video "
                          "needs 'rgb_array' frames; make the env with "
                          "render_mode='rgb_array' (an env creator: honour that key of "
                          "env_config)")
    return gym.wrappers.RecordVideo(env, video_dir, episode_trigger=lambda episode: True,
                                    name_prefix=name_prefix)


@dataclass
class LoadedCheckpoint:
    """A checkpoint's learner policies, loaded for evaluation (what
    :func:`load_for_evaluation` returns): ``name`` (the algorithm's), ``config`` (the
    algorithm's config as saved), ``workers`` (a local WorkerSet of one worker, the
    driver's, holding the restored policies, its env made for evaluation) and
    ``metrics`` (the run's counters and info as saved). Nothing trains;
    :func:`evaluate_policy` takes it as it takes an algorithm. ``stop()`` (or
    ``with``) closes the worker's env."""

    name: str
    config: Any
    workers: Any
    metrics: Any

    def get_policy(self, policy_id: str = "default_policy"):
        """The restored policy ``policy_id`` (the driver's worker's)."""
        return self.workers.local_worker().get_policy(policy_id)

    def stop(self) -> None:
        """Close the worker's env (idempotent)."""
        self.workers.stop()

    def __enter__(self) -> "LoadedCheckpoint":
        return self

    def __exit__(self, *exc) -> None:
        self.stop()


def load_for_evaluation(path: str, *, allow_pickle: bool = False) -> LoadedCheckpoint:
    """The learner policies of the checkpoint at ``path`` (a checkpoint, a directory of
    them, a run directory or a Ray Tune trial's:
    :func:`~flowrl.checkpoint.resolve_checkpoint`), ready to evaluate: the
    algorithm's config is rebuilt as saved, and from it one worker on the driver
    (local backend, one env made for evaluation) whose policies get the
    checkpoint's states, and its exploration state where the checkpoint holds one
    (DQN, Ape-X). Nothing of the training topology is built (no remote workers,
    learner threads, replay actors or process groups), so checkpoints of
    algorithms that need remote workers (IMPALA, APPO, A3C, DD-PPO, Ape-X) load like
    any other. ``allow_pickle`` lets it load the checkpoint's pickled parts (a
    config holding functions): only for checkpoints you trust. ConfigError (one
    line) when it cannot be.

    >>> import tempfile
    >>> from flowrl.algorithms import PG, PGConfig
    >>> d = tempfile.mkdtemp()
    >>> with PG(PGConfig(env="CartPole-v1", train_batch_size=50,
    ...                  rollout_fragment_length=50, seed=0)) as algo:
    ...     _ = algo.train(); _ = algo.save(d)
    >>> with load_for_evaluation(d) as loaded:
    ...     r = evaluate_policy(loaded, episodes=2, seed=0)
    >>> loaded.name, loaded.metrics.counters["training_iteration"], len(r["returns"])
    ('pg', 1, 2)
    """
    from flowrl import checkpoint
    from flowrl.algorithms import algorithm_class
    from flowrl.algorithms.dqn import restore_exploration
    from flowrl.checkpoint import restore_local_worker, saved_config
    from flowrl.metrics import MetricsContext
    from flowrl.workers import WorkerSet
    state = checkpoint.read_checkpoint(path, allow_pickle=allow_pickle)
    cls = algorithm_class(state.get("algorithm"))
    where = f"checkpoint {state['path']!r}"
    worker_state = state.get("worker")
    if not isinstance(worker_state, dict) or "policies" not in worker_state:
        raise ConfigError(f"{where} holds no worker.policies; it was not written by "
                          "Algorithm.save()")
    config = saved_config(cls, state, where)
    pickled = checkpoint.find_pickled(worker_state)
    if pickled is not None:
        raise ConfigError(f"{where}: its worker field {pickled.where} ({pickled.type_name}) was "
                          "saved with pickle, and unpickling can run any code: pass "
                          "allow_pickle=True (CLI: --allow-pickle) only for a checkpoint you trust")
    policy_class = cls.get_policy_class(config) or cls.policy_class
    worker_config = dataclasses.replace(cls.worker_config(config, policy_class),
                                        num_envs_per_worker=1, training=False,
                                        vector_env="sync")
    workers = WorkerSet(config.env, policy_class, worker_config, num_workers=0,
                        backend="local")
    try:
        restore_local_worker(workers.local_worker(), state,
                             f"load_for_evaluation({state['path']!r})", config.env)
        extra = state.get("extra")
        if isinstance(extra, dict) and extra.get("exploration"):
            restore_exploration(workers, extra["exploration"])
        metrics = MetricsContext()
        metrics.restore(state.get("metrics") or {})
    except BaseException:
        workers.stop()
        raise
    return LoadedCheckpoint(cls.name, config, workers, metrics)


__all__ = ["evaluate_policy", "load_for_evaluation", "LoadedCheckpoint", "play_episodes",
           "record_video", "import_moviepy",
           "assign_episodes", "summarize_evaluation", "Evaluation", "MAX_EPISODE_STEPS"]
