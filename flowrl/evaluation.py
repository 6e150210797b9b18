"""Evaluation: whole episodes with the current weights, exactly as many as asked.

Policy. An evaluation of ``n`` episodes hands them out before anything runs:
episode ``e`` goes to env slot ``e % S`` of the ``S`` slots (every env of every
evaluation worker, in worker then env order; :func:`assign_episodes`). Each slot
plays its episodes one after the other, each from a fresh reset, and stops when
it has played them. So exactly ``n`` episodes complete, which episodes count does
not depend on how long any of them is (no bias toward short episodes, as taking
the first ``n`` to finish across parallel envs would have), and there are no
extra in-flight episodes to discard. The price: an evaluation lasts as long as
its slowest slot. Results are ordered by episode index, whatever finished first.

:func:`play_episodes` is the one episode loop (one batched policy forward per
step over the slots still playing; a recurrent policy carries its state per
slot), built on the samplers' shared step (:mod:`flowrl.workers.env_loop`). Envs are made for evaluation (Atari: whole games, raw scores). With a
seed, episode ``e`` resets with ``seed + e``, so an evaluation repeats exactly.

:class:`Evaluation` is the plan step an :class:`~flowrl.algorithms.Algorithm`
adds after its reporting when ``evaluation_interval`` is set (node
``evaluation`` in ``algo.plan.to_dot()``): on iterations ``N, 2N, ...`` it copies
the learner's weights to its own evaluation WorkerSet, runs one evaluation
there, and returns the result with ``result["evaluation"]``. State it keeps: the
last iteration it saw and at most one evaluation in flight (started early by
``evaluation_parallel_to_training``). It touches no counter: evaluation steps
are not training steps. :func:`evaluate_policy` (``flowrl evaluate``) plays the
same loop on one env beside an algorithm.

>>> from flowrl.algorithms import PG, PGConfig
>>> algo = PG(PGConfig(env="CartPole-v1", seed=0))
>>> r = evaluate_policy(algo, episodes=2, seed=0)
>>> len(r["returns"]), r["mean"] == sum(r["returns"]) / 2
(2, True)
>>> algo.stop()
"""

from __future__ import annotations

import dataclasses
import functools
import time
from dataclasses import dataclass
from typing import Any, Sequence

import gymnasium as gym
import numpy as np

from flowrl.errors import ConfigError
from flowrl.workers.env_loop import Acting, Episodes, defers_vf_preds

#: An episode longer than this many steps is cut there (an env without a time
#: limit cannot hang an evaluation).
MAX_EPISODE_STEPS = 100_000


def assign_episodes(episodes: Sequence[int], slots: Sequence[tuple[int, int]]
                    ) -> dict[int, list[list[int]]]:
    """Episode indices per worker and env: ``{worker_index: [env 0's, env 1's, ...]}``.

    ``slots`` is ``(worker_index, num_envs)`` per worker; episode ``episodes[k]``
    goes to the ``k % S``-th of the ``S`` env slots (workers in the order given,
    envs in order), so slots differ by at most one episode.

    >>> assign_episodes(range(5), [(1, 2), (2, 1)])
    {1: [[0, 3], [1, 4]], 2: [[2]]}
    """
    order = [(w, i) for w, n in slots for i in range(n)]
    if not order:
        raise ConfigError("assign_episodes: no env slot to play episodes on")
    out: dict[int, list[list[int]]] = {w: [[] for _ in range(n)] for w, n in slots}
    for k, e in enumerate(episodes):
        w, i = order[k % len(order)]
        out[w][i].append(int(e))
    return out


def play_episodes(envs: Sequence[Any], policy, schedule: Sequence[Sequence[int]], *,
                  explore: bool = False, seed: int | None = None,
                  max_steps: int = MAX_EPISODE_STEPS,
                  callbacks: Any = None) -> list[dict[str, Any]]:
    """Play ``schedule[i]`` (episode indices) on ``envs[i]``, every env at once.

    Each episode starts from ``env.reset(seed=seed + index)`` (``seed=None``: no
    reseeding) and runs to termination or truncation, or ``max_steps`` steps.
    Each step is one ``policy.compute_actions`` over the envs still playing,
    taking the mode unless ``explore``; a recurrent policy gets each env's state,
    previous action and reward (zeros at an episode's start). ``Box`` actions are
    clipped to the bounds, ``Discrete`` ones reach the env as ints. Returns
    ``{"episode": index, "episode_reward", "episode_len"}`` per episode, ordered by
    index. Touches no metrics. ``callbacks`` (the worker's
    :class:`~flowrl.callbacks.EpisodeCallbacks`, or None) runs the episode hooks as
    the samplers do, and an episode's custom metrics join its entry.

    >>> import gymnasium as gym
    >>> from flowrl.policies import PGPolicy
    >>> envs = [gym.make("CartPole-v1") for _ in range(2)]
    >>> p = PGPolicy(envs[0].observation_space, envs[0].action_space, seed=0)
    >>> out = play_episodes(envs, p, [[0, 2], [1]], seed=0)
    >>> [e["episode"] for e in out], all(e["episode_len"] > 0 for e in out)
    ([0, 1, 2], True)
    """
    if len(schedule) > len(envs):
        raise ConfigError(f"play_episodes: a schedule for {len(schedule)} envs, but "
                          f"{len(envs)} envs")
    n = len(schedule)
    acting = Acting(policy, envs[0].action_space if envs else None, explore=explore,
                    num_rows=n)
    lean = not acting.recurrent and defers_vf_preds(policy)
    episodes = Episodes(n, callbacks)
    queues = [list(s) for s in schedule]
    obs: list[Any] = [None] * n  # per slot: its current observation
    out: list[dict[str, Any]] = []

    def begin(i: int) -> bool:
        """Slot ``i``'s next episode from a fresh reset; False when it has played all."""
        if not queues[i]:
            return False
        e = queues[i].pop(0)
        obs[i], info = envs[i].reset(seed=None if seed is None else seed + e)
        episodes.begin(i, obs[i], info, episode_id=e)
        return True

    playing = [i for i in range(n) if begin(i)]  # the slots with an episode under way
    while playing:
        actions, extra = acting.act(np.stack([np.asarray(obs[i]) for i in playing]),
                                    lean=lean, rows=playing)
        to_env = acting.to_env(actions)
        rewards = np.zeros(len(playing))
        ended = np.zeros(len(playing), bool)
        still = []
        for row, i in enumerate(playing):
            obs[i], reward, terminated, truncated, info = envs[i].step(to_env[row])
            rewards[row] = reward = float(reward)
            episodes.t[i] += 1
            episodes.ret[i] += reward
            length = int(episodes.t[i])
            ended[row] = done = bool(terminated or truncated or length >= max_steps)
            if episodes.callbacks is not None:
                episodes.step(i, obs[i], actions[row], reward, info, done)
            if not done:
                still.append(i)
                continue
            out.append(episodes.finish(i, {"episode": int(episodes.eps_id[i]),
                                           "episode_reward": float(episodes.ret[i]),
                                           "episode_len": length}))
            if begin(i):
                still.append(i)
        acting.advance(extra, actions, rewards, ended, rows=playing)
        playing = still
    return sorted(out, key=lambda e: e["episode"])


def _play_on_worker(schedule: dict[int, list[list[int]]], explore: bool, seed: int | None,
                    max_steps: int, worker) -> list[dict[str, Any]]:
    """What an evaluation worker runs: its part of ``schedule``."""
    mine = schedule.get(worker.worker_index)
    if not mine:
        return []
    return worker.play_episodes(mine, explore=explore, seed=seed, max_steps=max_steps)


def summarize_evaluation(episodes: list[dict[str, Any]]) -> dict[str, Any]:
    """``result["evaluation"]``: :func:`~flowrl.ops.metric_ops.summarize_episodes`
    of ``episodes`` plus ``episodes_this_iter`` and ``timesteps_this_iter`` (the
    evaluation's env steps).

    >>> summarize_evaluation([{"episode_reward": 2.0, "episode_len": 2},
    ...                       {"episode_reward": 4.0, "episode_len": 4}])["episode_reward_mean"]
    3.0
    """
    from flowrl.ops.metric_ops import summarize_episodes
    return {**summarize_episodes(episodes), "episodes_this_iter": len(episodes),
            "timesteps_this_iter": int(sum(e["episode_len"] for e in episodes))}


@dataclass
class _InFlight:
    """One started evaluation: for which iteration, what each remote worker was
    asked (WorkerSet calls), and the driver's evaluation worker's episodes."""

    iteration: int
    started: list
    local: list
    seed: int | None
    began: float


class Evaluation:
    """``for_each(Evaluation(...))`` on an algorithm's result stream; see the module
    docstring.

    ``workers`` is the evaluation WorkerSet (its envs made for evaluation; with no
    remote workers its local worker plays every episode, else the remote workers
    do), ``learner`` the training WorkerSet whose local worker's weights are
    evaluated. On a result of iteration ``k`` with ``k % interval == 0`` it returns
    a copy of the result with ``"evaluation"``: :func:`summarize_evaluation` of
    exactly ``duration`` episodes plus ``time_s``. ``seed`` (None: unseeded) seeds
    the episodes of iteration ``k`` from ``(seed, k)``, so a restored run evaluates
    the same episodes.

    ``parallel`` (``evaluation_parallel_to_training``): :meth:`before_iteration`
    (called by ``Algorithm.train()`` before it steps the plan) starts iteration
    ``k``'s evaluation, with the weights iteration ``k`` starts from, before its
    training step; the result of iteration ``k`` then waits for it. The requests
    go through the WorkerSet's calls: on Ray the evaluation workers play while the
    driver trains; on the local backend a request runs when it is made, so the
    evaluation runs before the training step (same episodes, same weights, no
    overlap). Without ``parallel`` (or when iterated without ``train()``) the
    evaluation runs after the training step, with the weights it produced.

    A remote evaluation worker lost during an evaluation is replaced (or dropped)
    as the WorkerSet's failure settings say; its episodes are then played on the
    driver's evaluation worker, so the count stays exact.
    """

    def __init__(self, workers, learner, *, interval: int | None, duration: int,
                 explore: bool = False, parallel: bool = False, seed: int | None = None,
                 max_steps: int = MAX_EPISODE_STEPS):
        if interval is not None and (isinstance(interval, bool) or not isinstance(interval, int)
                                     or interval < 1):
            raise ConfigError(f"Evaluation(interval={interval!r}): must be None or an int >= 1")
        if isinstance(duration, bool) or not isinstance(duration, int) or duration < 1:
            raise ConfigError(f"Evaluation(duration={duration!r}): must be an int >= 1")
        self.workers, self.learner = workers, learner
        self.interval, self.duration = interval, duration
        self.explore, self.parallel, self.seed = explore, parallel, seed
        self.max_steps = max_steps
        self._last_iteration = 0
        self._in_flight: _InFlight | None = None

    def due(self, iteration: int) -> bool:
        """Whether iteration ``iteration`` reports an evaluation."""
        return self.interval is not None and iteration % self.interval == 0

    def __call__(self, result: Any) -> Any:
        it = result.get("training_iteration") if isinstance(result, dict) else None
        it = it if isinstance(it, int) else self._last_iteration + 1
        self._last_iteration = it
        if not self.due(it):
            return result
        flight, self._in_flight = self._in_flight, None
        if flight is not None and flight.iteration != it:
            self._finish(flight)  # started for an iteration that reported otherwise
            flight = None
        return {**result, "evaluation": self._finish(flight or self._start(it))}

    def before_iteration(self, iteration: int) -> None:
        """Start ``iteration``'s evaluation now when it is due and runs in parallel
        to training (no-op otherwise)."""
        if self.parallel and self.due(iteration) and self._in_flight is None:
            self._in_flight = self._start(iteration)

    def evaluate(self, iteration: int) -> dict[str, Any]:
        """One evaluation now, with the learner's current weights (episodes seeded
        as for ``iteration``); returns what ``result["evaluation"]`` would hold."""
        return self._finish(self._start(iteration))

    def _round_seed(self, iteration: int) -> int | None:
        if self.seed is None:
            return None
        return int(np.random.SeedSequence([self.seed, iteration]).generate_state(1)[0])

    def _start(self, iteration: int) -> _InFlight:
        local = self.workers.local_worker()
        local.set_weights(self.learner.local_worker().get_weights())
        self.workers.sync_weights()
        remotes = self.workers.worker_indices()
        slots = [(idx, local.num_envs) for idx in (remotes or [local.worker_index])]
        schedule = assign_episodes(range(self.duration), slots)
        seed = self._round_seed(iteration)
        play = functools.partial(_play_on_worker, schedule, self.explore, seed, self.max_steps)
        began = time.perf_counter()
        started = self.workers.foreach_remote_worker_start(play) if remotes else []
        return _InFlight(iteration, started, [] if remotes else play(local), seed, began)

    def _finish(self, flight: _InFlight) -> dict[str, Any]:
        episodes = list(flight.local)
        if flight.started:
            for part in self.workers.foreach_remote_worker_finish(flight.started):
                episodes.extend(part)
        got = {e["episode"] for e in episodes}
        missing = [e for e in range(self.duration) if e not in got]
        if missing:  # a lost remote worker's share, played on the driver's worker
            local = self.workers.local_worker()
            schedule = assign_episodes(missing, [(local.worker_index, local.num_envs)])
            episodes.extend(_play_on_worker(schedule, self.explore, flight.seed,
                                            self.max_steps, local))
        episodes.sort(key=lambda e: e["episode"])
        out = summarize_evaluation(episodes)
        out["time_s"] = time.perf_counter() - flight.began
        return out

    def cancel(self) -> None:
        """Forget an evaluation in flight (the algorithm is stopping)."""
        self._in_flight = None


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
    from flowrl.checkpoint import restore_local_worker, saved_config
    from flowrl.algorithms.dqn import restore_exploration
    from flowrl.experiment import algorithm_class
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
