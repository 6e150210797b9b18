"""Rollout workers and worker sets: where experience is collected.

``MultiAgentEnv``, ``make_multi_agent`` and ``PettingZooEnv`` live in
:mod:`flowrl.envs` and are re-exported here, where RLlib users look for them.
"""

from flowrl.envs.multi_agent import MultiAgentEnv, make_multi_agent
from flowrl.envs.pettingzoo import PettingZooEnv
from flowrl.runtime.global_worker import get_global_worker
from flowrl.workers.episode import Episode
from flowrl.workers.rollout_worker import PolicySpec, RolloutWorker
from flowrl.workers.worker_set import MultiWorkerSet, WorkerConfig, WorkerSet

__all__ = ["get_global_worker", "RolloutWorker", "PolicySpec", "WorkerSet", "WorkerConfig",
           "MultiAgentEnv", "make_multi_agent", "Episode", "PettingZooEnv", "MultiWorkerSet"]
