"""Evaluation during training: whole episodes with the current weights, exactly
as many as asked (:class:`Evaluation`), or off-policy estimates of the current
policy on a held-out dataset (:class:`DatasetEvaluation`).

Policy. An evaluation of ``n`` episodes hands them out before anything runs:
episode ``e`` goes to env slot ``e % S`` of the ``S`` slots (every env of every
evaluation worker, in worker then env order; :func:`assign_episodes`). Each slot
plays its episodes one after the other, each from a fresh reset, and stops when
it has played them (:func:`flowrl.workers.play.play_episodes`). So exactly ``n``
episodes complete, which episodes count does not depend on how long any of them
is (no bias toward short episodes, as taking the first ``n`` to finish across
parallel envs would have), and there are no extra in-flight episodes to discard.
The price: an evaluation lasts as long as its slowest slot. Results are ordered by
episode index, whatever finished first. Envs are made for evaluation (Atari: whole
games, raw scores). With a seed, episode ``e`` resets with ``seed + e``, so an
evaluation repeats exactly.

:class:`Evaluation` is the plan step an :class:`~flowrl.algorithms.Algorithm`
adds after its reporting when ``evaluation_interval`` is set (node
``evaluation`` in ``algo.plan.to_dot()``): on iterations ``N, 2N, ...`` it copies
the learner's weights to its own evaluation WorkerSet, runs one evaluation
there, and returns the result with ``result["evaluation"]``. State it keeps: the
last iteration it saw and at most one evaluation in flight (started early by
``evaluation_parallel_to_training``). It touches no counter: evaluation steps
are not training steps. Evaluating beside an algorithm or from a checkpoint
(``flowrl evaluate``) is :mod:`flowrl.evaluation`'s.
"""

from __future__ import annotations

import functools
import time
from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np

from flowrl.batch import MultiAgentBatch, SampleBatch
from flowrl.errors import ConfigError
from flowrl.offline.estimators import (estimators_state, make_estimators, restore_estimators,
                                       whole_episodes)
from flowrl.ops.metric_ops import summarize_episodes
from flowrl.ops.off_policy_ops import OFF_POLICY_ESTIMATION
from flowrl.workers.play import MAX_EPISODE_STEPS


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
            self.finish(flight)  # started for an iteration that reported otherwise
            flight = None
        return {**result, "evaluation": self.finish(flight or self.start(it))}

    def before_iteration(self, iteration: int) -> None:
        """Start ``iteration``'s evaluation now when it is due and runs in parallel
        to training (no-op otherwise)."""
        if self.parallel and self.due(iteration) and self._in_flight is None:
            self._in_flight = self.start(iteration)

    def evaluate(self, iteration: int) -> dict[str, Any]:
        """One evaluation now, with the learner's current weights (episodes seeded
        as for ``iteration``); returns what ``result["evaluation"]`` would hold."""
        return self.finish(self.start(iteration))

    def _round_seed(self, iteration: int) -> int | None:
        if self.seed is None:
            return None
        return int(np.random.SeedSequence([self.seed, iteration]).generate_state(1)[0])

    def start(self, iteration: int) -> Any:
        """Begin iteration ``iteration``'s evaluation (the episodes handed out, the
        remote workers asked); :meth:`finish` of what it returns completes it. A
        subclass that evaluates otherwise replaces both."""
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

    def finish(self, flight: Any) -> dict[str, Any]:
        """What ``result["evaluation"]`` holds for the evaluation :meth:`start` began."""
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

    def stop(self) -> None:
        """Stop what the evaluation runs on (its WorkerSet); idempotent."""
        self.workers.stop()


class DatasetEvaluation(Evaluation):
    """Evaluation on a held-out dataset (``evaluation_config={"input": PATH}``): on
    the same iterations as :class:`Evaluation`, the learner's current policy is
    scored off-policy on the first ``duration`` whole episodes of ``reader``'s data
    (:func:`~flowrl.offline.estimators.whole_episodes`, read once and kept), with
    the estimators ``methods`` names; no env is stepped. ``result["evaluation"]``
    holds ``off_policy_estimation`` (per method, as training reports it),
    ``episodes_this_iter`` (the episodes estimated) and ``time_s``. Its state for
    checkpoints (:meth:`get_state`) is the estimators' (FQE's fit).

    >>> import tempfile
    >>> from flowrl.offline.writer import DatasetWriter
    >>> from flowrl.offline.reader import DatasetReader
    >>> from flowrl.policies import PGPolicy
    >>> from flowrl.workers import WorkerConfig, WorkerSet
    >>> ws = WorkerSet("CartPole-v1", PGPolicy, WorkerConfig(rollout_fragment_length=60,
    ...                seed=0), num_workers=0, backend="local")
    >>> path = tempfile.mkdtemp()
    >>> writer = DatasetWriter(path, format="json"); writer.write(ws.local_worker().sample())
    >>> writer.close()
    >>> ev = DatasetEvaluation(DatasetReader([path], format="json"), ws, methods=["is"],
    ...                        gamma=0.99, interval=1, duration=2)
    >>> out = ev.evaluate(1)
    >>> out["episodes_this_iter"], round(out["off_policy_estimation"]["is"]["v_gain"], 3)
    (2, 1.0)
    >>> ev.stop(); ws.stop()
    """

    def __init__(self, reader, learner, *, methods, gamma: float, interval: int | None,
                 duration: int, seed: int | None = None, policy_id: str = "default_policy"):
        super().__init__(None, learner, interval=interval, duration=duration, seed=seed)
        self.reader, self.policy_id = reader, policy_id
        self.estimators = make_estimators(
            methods, gamma=gamma, seed=seed, policy=learner.local_worker().get_policy(policy_id),
            where="off_policy_estimation_methods (evaluation on a dataset)")
        if not self.estimators:
            raise ConfigError("evaluation on a dataset scores the policy off-policy; set "
                              "off_policy_estimation_methods (e.g. ['is', 'wis'])")
        self._episodes: SampleBatch | None = None

    def get_state(self) -> dict[str, Any]:
        """The estimators' state (:func:`~flowrl.offline.estimators.estimators_state`)."""
        return estimators_state(self.estimators)

    def set_state(self, state: dict[str, Any]) -> None:
        """Restore what :meth:`get_state` returned."""
        restore_estimators(self.estimators, state)

    def held_out(self) -> SampleBatch:
        """The first ``duration`` whole episodes of the dataset (read on first use)."""
        if self._episodes is None:
            rows = []
            for batch in self.reader.read_pass(0):
                if isinstance(batch, MultiAgentBatch):
                    if set(batch.policy_batches) != {self.policy_id}:
                        raise ConfigError(
                            f"evaluation_config['input']: {self.reader.paths} holds batches of "
                            f"policies {sorted(batch.policy_batches)}; evaluation on a dataset "
                            f"scores policy {self.policy_id!r} of single-agent data")
                    batch = batch.policy_batches[self.policy_id]
                rows.append(batch)
            if not rows:
                raise ConfigError(f"evaluation_config['input']: {self.reader.paths} gave no "
                                  "batch to evaluate on")
            self._episodes = whole_episodes(SampleBatch.concat_samples(rows), self.duration)
        return self._episodes

    def start(self, iteration: int) -> float:
        return time.perf_counter()  # nothing runs ahead: estimating steps no env

    def finish(self, flight: float) -> dict[str, Any]:
        episodes = self.held_out()
        policy = self.learner.local_worker().get_policy(self.policy_id)
        estimates = {name: est.estimate(episodes, policy)
                     for name, est in self.estimators.items()}
        count = next(iter(estimates.values()))["num_episodes"]
        return {OFF_POLICY_ESTIMATION: estimates, "episodes_this_iter": count,
                "time_s": time.perf_counter() - flight}

    def stop(self) -> None:
        self.reader.close()


__all__ = ["Evaluation", "DatasetEvaluation", "assign_episodes", "summarize_evaluation"]
