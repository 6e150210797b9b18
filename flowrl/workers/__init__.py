"""Rollout workers and worker sets: where experience is collected."""

from flowrl.runtime.global_worker import get_global_worker
from flowrl.workers.multi_agent_env import MultiAgentEnv, make_multi_agent
from flowrl.workers.episode import Episode
from flowrl.workers.pettingzoo_env import PettingZooEnv
from flowrl.workers.rollout_worker import PolicySpec, RolloutWorker
from flowrl.workers.worker_set import MultiWorkerSet, WorkerConfig, WorkerSet

__all__ = ["get_global_worker", "RolloutWorker", "PolicySpec", "WorkerSet", "WorkerConfig",
           "MultiAgentEnv", "make_multi_agent", "Episode", "PettingZooEnv", "MultiWorkerSet"]
