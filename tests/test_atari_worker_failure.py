"""A rollout worker killed mid-game under IMPALA on Pong is replaced, and no partial
game is ever reported.

Reported Atari episodes are whole games (:mod:`flowrl.envs.atari`): a game of Pong
ends when one side has 21 points. The killed worker's game in progress dies with
it; its replacement starts new games. A callback records each reported game's
points for and against (``hist_stats``): every one must have reached 21.
"""

from __future__ import annotations

import pytest

from flowrl.algorithms.impala import IMPALA, IMPALAConfig
from flowrl.callbacks import DefaultCallbacks

pytestmark = pytest.mark.ray


class GamePoints(DefaultCallbacks):
    """Points won and lost per episode, as ``hist_stats`` ``points_won``/``points_lost``."""

    def on_episode_start(self, *, episode, **kwargs):
        episode.user_data["won"] = episode.user_data["lost"] = 0

    def on_episode_step(self, *, episode, **kwargs):
        r = episode.last_reward_for() or 0.0
        episode.user_data["won" if r > 0 else "lost"] += r != 0

    def on_episode_end(self, *, episode, **kwargs):
        episode.hist_data["points_won"] = [episode.user_data["won"]]
        episode.hist_data["points_lost"] = [episode.user_data["lost"]]


def _steps_into_game(worker):
    return worker.sampler.episodes.t.tolist()


@pytest.mark.timeout(300)
def test_a_worker_killed_mid_game_is_replaced_and_only_whole_games_are_reported(ray_session):
    pytest.importorskip("ale_py")
    from ray_helpers import kill
    ray = ray_session
    algo = IMPALA(IMPALAConfig(
        env="ALE/Pong-v5", backend="ray", num_workers=2, num_envs_per_worker=1,
        rollout_fragment_length=25, train_batch_size=50, num_cpus_per_worker=0,
        model={"conv_filters": [[8, 8, 4], [8, 4, 4]], "post_fcnet_hiddens": [32]},
        callbacks=GamePoints, seed=1, recreate_failed_workers=True))
    games: list[tuple[float, float]] = []
    try:
        algo.train()
        victim = algo.workers.remote_workers()[0]
        into = ray.get(victim.apply.remote(_steps_into_game))
        assert 0 < into[0] < 500        # mid-game: a random Pong game takes ~800 steps
        kill(victim)
        restarts, iterations = 0, 0
        while restarts < 1 or len(games) < 2:
            # a bound on work, not time: 400 iterations of 50 steps are 25 random games
            iterations += 1
            assert iterations <= 400, (restarts, games)
            result = algo.train()
            restarts = result["num_worker_restarts"]
            hist = result["hist_stats"]
            new = result["episodes_this_iter"]
            if new:
                games += list(zip(hist["points_won"][-new:], hist["points_lost"][-new:]))
                assert -21 <= result["episode_reward_min"] <= result["episode_reward_max"] <= 21
        assert algo.workers.remote_workers()[0] is not victim
        assert result["num_healthy_workers"] == 2
    finally:
        algo.stop()
    assert games and all(max(won, lost) == 21 for won, lost in games), games
