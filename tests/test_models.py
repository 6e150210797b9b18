"""Models: the catalog, recurrent state through sampling and learning, custom models.

Sequence cutting, padding and masking are checked against hand-computed cases;
the learner's forward over cut sequences must reproduce what the workers computed
while acting (the state really is carried, reset and restarted), and padding must
not change any loss or gradient.
"""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import torch
from torch import nn

from flowrl.algorithms import (A3C, A3CConfig, DQN, DQNConfig, IMPALA, IMPALAConfig, PPO,
                               PPOConfig)
from flowrl.batch import SampleBatch as SB
from flowrl.errors import ConfigError
from flowrl.models import ModelConfig, TorchModelV2, get_model, register_model
from flowrl.models.recurrent import LSTMWrapper
from flowrl.models.sequences import (SEQ_BOOTSTRAP_VALUE, SEQ_LENS, SEQ_MASK, cut_sequences,
                                     pad_sequences, sequence_mask)
from flowrl.policies import IMPALAPolicy, PPOPolicy
from flowrl.replay.frames import OTHER_COLUMNS_BYTES, row_bytes
from flowrl.workers import RolloutWorker

RAY = pytest.param("ray", marks=pytest.mark.ray)
BOX = gym.spaces.Box(-1, 1, (3,), np.float32)
TWO = gym.spaces.Discrete(2)
LSTM = {"use_lstm": True, "lstm_cell_size": 8, "max_seq_len": 4,
        "lstm_use_prev_action": True, "lstm_use_prev_reward": True}


def _backend(backend, request):
    if backend == "ray":
        request.getfixturevalue("ray_session")
    return backend


# -- ModelConfig -----------------------------------------------------------------
def test_model_config_accepts_sizes_dicts_and_itself_and_names_bad_fields():
    assert ModelConfig.coerce((32,)) == ModelConfig(fcnet_hiddens=(32,))
    assert ModelConfig.coerce({"use_lstm": True}).use_lstm
    config = ModelConfig(max_seq_len=5)
    assert ModelConfig.coerce(config) is config
    assert PPOConfig(env="CartPole-v1", model=[16]).model.fcnet_hiddens == (16,)
    with pytest.raises(ConfigError, match=r"PPOConfig\.model\.conv_filters\[1\]=\[8, 3\]: give "
                                          r"\[out_channels, kernel, stride\]"):
        PPOConfig(env="CartPole-v1", model={"conv_filters": [[8, 3, 1], [8, 3]]})
    with pytest.raises(ConfigError, match=r"model\.lstm_cel_size: unknown model field; did you "
                                          r"mean lstm_cell_size\?"):
        ModelConfig.coerce({"lstm_cel_size": 8})
    with pytest.raises(ConfigError, match=r"model\.use_lstm='yes': must be true or false"):
        ModelConfig.coerce({"use_lstm": "yes"})


def _orthogonal_with_gain(weight: torch.Tensor, gain: float) -> bool:
    w = weight.detach().reshape(len(weight), -1)
    gram = w @ w.T if w.shape[0] <= w.shape[1] else w.T @ w
    return torch.allclose(gram, gain ** 2 * torch.eye(len(gram)), atol=1e-4)


def test_orthogonal_init_gives_hidden_layers_gain_sqrt2_and_leaves_the_heads_alone():
    image = gym.spaces.Box(0, 255, (4, 10, 10), np.uint8)
    shared = {"logits": 0.01, "value_branch": 1.0}
    for space, model, heads, n_hidden in (
            (BOX, {"fcnet_hiddens": [8, 8]}, {"pi.4": 0.01, "vf.4": 1.0}, 4),
            (BOX, {"fcnet_hiddens": [8], "vf_share_layers": True}, shared, 1),
            (image, {"conv_filters": [[8, 3, 1], [8, 3, 1]], "post_fcnet_hiddens": [16]},
             shared, 6)):
        for orthogonal in (False, True):
            net = PPOPolicy(space, TWO, model={**model, "orthogonal_init": orthogonal},
                            seed=0).model
            layers = {name: m for name, m in net.named_modules()
                      if isinstance(m, (nn.Linear, nn.Conv2d))}
            hidden = {name: m for name, m in layers.items() if name not in heads}
            assert len(hidden) == n_hidden and len(layers) == n_hidden + 2, sorted(layers)
            for name, m in layers.items():
                if name in heads:  # orthogonal either way, with the head's own gain
                    assert _orthogonal_with_gain(m.weight, heads[name]), name
                else:
                    assert _orthogonal_with_gain(m.weight, 2 ** 0.5) == orthogonal, name
                    assert (not m.bias.detach().any()) == orthogonal, name
    with pytest.raises(ConfigError, match=r"model\.orthogonal_init=1: must be true or false"):
        ModelConfig.coerce({"orthogonal_init": 1})


def test_zero_mean_centres_uint8_images_in_both_cnns_and_leaves_float_images_alone():
    """``zero_mean`` feeds the first conv layer (x - 128) / 128 instead of x / 255, in
    the built-in CNN and the IMPALA ResNet; a float image is never rescaled."""
    from flowrl.models.visionnet import ImpalaResNet, VisionNetwork

    seen = []
    for cls, dtype in ((VisionNetwork, np.uint8), (ImpalaResNet, np.uint8),
                       (VisionNetwork, np.float32)):
        space = gym.spaces.Box(0, 255, (4, 10, 10), dtype)
        for zero_mean in (False, True):
            config = ModelConfig.coerce({"conv_filters": [[8, 3, 1]], "zero_mean": zero_mean})
            net = cls(space, TWO, 2, config, "net")
            first = next(m for m in net.modules() if isinstance(m, nn.Conv2d))
            hook = first.register_forward_hook(lambda _m, i, _o: seen.append(i[0]))
            obs = torch.tensor([[[[0, 128, 255]]]], dtype=torch.float32).expand(1, 4, 10, 3)
            obs = torch.cat([obs] * 4, dim=-1)[..., :10].to(getattr(torch, np.dtype(dtype).name))
            net({"obs": obs}, [], None)
            hook.remove()
            want = (torch.tensor([0.0, 128.0, 255.0]) if dtype == np.float32
                    else torch.tensor([-1.0, 0.0, 127 / 128]) if zero_mean
                    else torch.tensor([0.0, 128 / 255, 1.0]))
            assert torch.allclose(seen[-1][0, 0, 0, :3], want), (cls, dtype, zero_mean)
    with pytest.raises(ConfigError, match=r"model\.zero_mean='no': must be true or false"):
        ModelConfig.coerce({"zero_mean": "no"})


def test_ppo_adam_epsilon_reaches_the_optimizer_and_is_checked():
    algo = PPO(PPOConfig(env="CartPole-v1", num_workers=0, num_envs_per_worker=1,
                         rollout_fragment_length=16, train_batch_size=16,
                         sgd_minibatch_size=8, num_sgd_iter=1, adam_epsilon=1e-5, seed=0))
    try:
        algo.train()
        optimizer = algo.workers.local_worker().get_policy().optimizer
        assert [g["eps"] for g in optimizer.param_groups] == [1e-5]
    finally:
        algo.stop()
    with pytest.raises(ConfigError, match=r"PPOConfig\.adam_epsilon=0"):
        PPOConfig(env="CartPole-v1", adam_epsilon=0)
    with pytest.raises(ConfigError, match=r"adam_epsilon=-1"):
        PPOPolicy(BOX, TWO, adam_epsilon=-1)


# -- sequences: hand-computed cases ----------------------------------------------
def test_cut_sequences_splits_at_episodes_gaps_and_max_seq_len():
    # episode 3 runs t=0..4 (cut at 3 steps), then episode 4 t=0..1, then a gap in
    # episode 4's t (another fragment), then a one-step episode 9
    eps = np.array([3, 3, 3, 3, 3, 4, 4, 4, 4, 9])
    t = np.array([0, 1, 2, 3, 4, 0, 1, 7, 8, 0])
    starts, lens = cut_sequences(eps, t, max_seq_len=3)
    assert starts.tolist() == [0, 3, 5, 7, 9]
    assert lens.tolist() == [3, 2, 2, 2, 1]
    padded = pad_sequences(np.arange(10) + 10, starts, lens, 3)
    assert padded.tolist() == [[10, 11, 12], [13, 14, 0], [15, 16, 0], [17, 18, 0], [19, 0, 0]]
    assert sequence_mask(lens, 3).sum() == 10
    images = np.arange(10 * 2, dtype=np.uint8).reshape(10, 2)
    assert pad_sequences(images, starts, lens, 3).dtype == np.uint8  # dtype kept


def test_lstm_state_out_is_taken_at_each_sequences_true_end_not_at_the_padding():
    # ray-project/ray#21392: the state must come from step seq_len, not max_seq_len.
    torch.manual_seed(0)
    model = get_model(BOX, TWO, 2, {"use_lstm": True, "lstm_cell_size": 5})
    lens = torch.tensor([3, 1, 2])
    steps = 4
    x = torch.randn(3, steps, 3)
    x[sequence_mask(lens.numpy(), steps) == 0] = 0.0
    h0, c0 = torch.randn(3, 5), torch.randn(3, 5)
    with torch.no_grad():
        out, (h, c) = model({"obs_flat": x.reshape(-1, 3)}, [h0, c0], lens)
        for b in range(3):  # one step at a time from the same start state
            state = [h0[b:b + 1], c0[b:b + 1]]
            for step in range(int(lens[b])):
                o, state = model({"obs_flat": x[b, step:step + 1]}, state, torch.ones(1))
                torch.testing.assert_close(o[0], out.reshape(3, steps, -1)[b, step])
            torch.testing.assert_close(state[0][0], h[b])
            torch.testing.assert_close(state[1][0], c[b])


# -- recurrent sampling and learning ---------------------------------------------
def _recurrent_worker(policy_cls=PPOPolicy, **kwargs):
    return RolloutWorker(env="flowrl/CueRecall-v0", env_config={"num_cues": 3, "delay": 3},
                         policy=policy_cls, policy_config={"model": LSTM, **kwargs},
                         num_envs=3, rollout_fragment_length=11, seed=0)


def test_workers_carry_state_per_env_and_reset_it_at_episode_starts():
    batch = _recurrent_worker().sample()
    for k in ("state_in_0", "state_in_1", "state_out_0", "state_out_1", SB.PREV_ACTIONS,
              SB.PREV_REWARDS):
        assert k in batch, k
    first = batch[SB.T] == 0
    assert (batch["state_in_0"][first] == 0).all() and (batch["state_in_1"][first] == 0).all()
    assert (batch[SB.PREV_ACTIONS][first] == 0).all() and (batch[SB.PREV_REWARDS][first] == 0).all()
    same = (batch[SB.EPS_ID][1:] == batch[SB.EPS_ID][:-1]) & (batch[SB.T][1:] == batch[SB.T][:-1] + 1)
    assert same.sum() > 10
    np.testing.assert_array_equal(batch["state_in_0"][1:][same], batch["state_out_0"][:-1][same])
    np.testing.assert_array_equal(batch[SB.PREV_ACTIONS][1:][same], batch[SB.ACTIONS][:-1][same])
    np.testing.assert_array_equal(batch[SB.PREV_REWARDS][1:][same], batch[SB.REWARDS][:-1][same])
    assert not (batch["state_in_0"][~first] == 0).all()  # the state moved during episodes


def test_learner_sequences_reproduce_what_the_workers_computed_while_acting():
    worker = _recurrent_worker()
    policy = worker.get_policy()
    batch = worker.sample()
    train = policy._train_tensors(batch)
    mask = train[SEQ_MASK]
    assert mask.shape[1] == policy.max_seq_len and mask.sum() == batch.count
    with torch.no_grad():
        inputs, values = policy.model_out(policy._rows(train))
    flat = mask.reshape(-1)
    expected = pad_sequences(batch[SB.ACTION_DIST_INPUTS],
                             *cut_sequences(batch[SB.EPS_ID], batch[SB.T], policy.max_seq_len),
                             mask.shape[1]).reshape(-1, 3)[flat.numpy()]
    np.testing.assert_allclose(inputs[flat].numpy(), expected, atol=1e-5)
    np.testing.assert_allclose(values[flat].numpy(),
                               train[SB.VF_PREDS].reshape(-1)[flat].numpy(), atol=1e-5)


def test_padding_changes_no_loss_and_no_gradient():
    worker = _recurrent_worker()
    policy = worker.get_policy()
    batch = worker.sample()
    train = policy._train_tensors(batch)
    assert (~train[SEQ_MASK]).any()  # there is padding to poison

    def loss_and_grads(t):
        policy.model.zero_grad()
        loss, _ = policy.loss(policy._rows(t))
        loss.backward()
        return loss.detach(), [p.grad.clone() for p in policy.model.parameters()]

    clean = loss_and_grads(train)
    pad = ~train[SEQ_MASK]
    poisoned = {k: v.clone() for k, v in train.items()}
    for k in (SB.OBS, SB.ADVANTAGES, SB.VALUE_TARGETS, SB.ACTION_LOGP, SB.VF_PREDS,
              SB.PREV_REWARDS):
        poisoned[k][pad] = 1e3
    dirty = loss_and_grads(poisoned)
    torch.testing.assert_close(clean[0], dirty[0])
    for a, b in zip(clean[1], dirty[1]):
        torch.testing.assert_close(a, b)


def test_ppo_minibatches_shuffle_whole_sequences():
    worker = _recurrent_worker(sgd_minibatch_size=8, num_sgd_iter=2)
    policy = worker.get_policy()
    batch = worker.sample()
    seen = []
    step = policy.sgd_step
    policy.sgd_step = lambda mb: seen.append(mb.copies[0][SEQ_LENS].clone()) or step(mb)
    policy.learn_on_batch(batch)
    n_seqs = len(cut_sequences(batch[SB.EPS_ID], batch[SB.T], 4)[0])
    assert all(len(s) <= 2 for s in seen)  # 8 rows // max_seq_len 4 = 2 sequences
    per_epoch = sum(len(s) for s in seen) // 2
    assert per_epoch == n_seqs


def test_vtrace_runs_time_major_over_sequences_against_a_hand_computed_case():
    # on-policy with clip thresholds 1: vs is the n-step return bootstrapped from
    # each sequence's seq_bootstrap_value (gamma 0.5, rewards 1)
    policy = IMPALAPolicy(BOX, TWO, model=LSTM, gamma=0.5)
    lens = torch.tensor([3, 2])
    train = {SB.EPS_ID: torch.tensor([1, 1, 1, 2, 2, 0]), SB.T: torch.tensor([0, 1, 2, 5, 6, 0]),
             SB.TERMINATEDS: torch.tensor([False, False, False, False, True, False]),
             SB.TRUNCATEDS: torch.zeros(6, dtype=torch.bool),
             SB.REWARDS: torch.tensor([1.0, 1, 1, 1, 1, 0]),
             SB.ACTION_LOGP: torch.zeros(6), SEQ_LENS: lens,
             SEQ_MASK: torch.tensor([True, True, True, True, True, False]),
             SEQ_BOOTSTRAP_VALUE: torch.tensor([5.0, 0.0])}
    vs, _ = policy.vtrace_targets(train, torch.zeros(6), torch.full((6,), 0.25))
    np.testing.assert_allclose(vs[:5].numpy(), [2.375, 2.75, 3.5, 1.5, 1.0])


@pytest.mark.parametrize("algo_cls, config_cls, extra, backend", [
    (PPO, PPOConfig, {"sgd_minibatch_size": 32, "num_sgd_iter": 2}, "local"),
    (IMPALA, IMPALAConfig, {}, "local"), (A3C, A3CConfig, {}, "local"),
    # A3C on Ray: gradients computed in the worker actors, applied on the driver
    pytest.param(A3C, A3CConfig, {}, "ray", marks=pytest.mark.ray)])
def test_lstm_trains_end_to_end(algo_cls, config_cls, extra, backend, request):
    config = config_cls(env="flowrl/CueRecall-v0", env_config={"num_cues": 2, "delay": 2},
                        num_workers=1, backend=_backend(backend, request), seed=0, model=LSTM,
                        rollout_fragment_length=16, train_batch_size=64, **extra)
    algo = algo_cls(config)
    try:
        for _ in range(2):
            result = algo.train()
        assert result["timesteps_total"] > 0 and np.isfinite(result["episode_reward_mean"])
    finally:
        algo.stop()


def test_a_restored_recurrent_run_keeps_training(tmp_path):
    def make():
        return PPO(PPOConfig(env="flowrl/StatelessCartPole-v1", seed=0, model=LSTM,
                             rollout_fragment_length=32, train_batch_size=64,
                             sgd_minibatch_size=16, num_sgd_iter=1))
    algo = make()
    first = algo.train()["timesteps_total"]
    path = algo.save(str(tmp_path / "ckpt"))
    algo.stop()
    again = make()
    again.restore(path)
    assert again.train()["timesteps_total"] == 2 * first
    again.stop()


# -- images ----------------------------------------------------------------------
def test_cnn_keeps_uint8_until_the_model_and_refuses_stacks_that_do_not_fit():
    worker = RolloutWorker(env="flowrl/MinAtarBreakout-v0", policy=PPOPolicy,
                           policy_config={"model": {"vf_share_layers": True}},
                           num_envs=2, rollout_fragment_length=5, seed=0)
    batch = worker.sample()
    assert batch[SB.OBS].dtype == np.uint8 and batch[SB.OBS].shape[1:] == (4, 10, 10)
    policy = worker.get_policy()
    assert type(policy.model).__name__ == "VisionNetwork"
    assert policy.load_batch(batch).copies[0][SB.OBS].dtype == torch.uint8
    policy.learn_on_batch(batch)
    space = gym.spaces.Box(0, 255, (4, 10, 10), np.uint8)
    with pytest.raises(ConfigError, match=r"model\.conv_filters\[1\]=\[8, 9, 1\]: the 9x9 kernel "
                                          r"does not fit the 8x8 input"):
        PPOPolicy(space, TWO, model={"conv_filters": [[8, 3, 1], [8, 9, 1]]})
    with pytest.raises(ConfigError, match=r"no default conv stack for 12x12 images"):
        PPOPolicy(gym.spaces.Box(0, 255, (1, 12, 12), np.uint8), TWO)


def test_dqn_takes_a_cnn_and_refuses_use_lstm():
    algo = DQN(DQNConfig(env="flowrl/MinAtarBreakout-v0", seed=0, learning_starts=32,
                         rollout_fragment_length=16, train_batch_size=16,
                         timesteps_per_iteration=64, buffer_size=1000))
    algo.train()
    policy = algo.workers.local_worker().get_policy()
    assert type(policy.model.torso).__name__ == "_ImageTorso"
    # MinAtar's channel images are not frame stacks: stored whole, and the build-time
    # memory check counts them whole (not as one frame a row)
    held = algo.local_replay_buffer.stats()["bytes_per_row"]
    assert row_bytes(policy.observation_space) - OTHER_COLUMNS_BYTES < held \
        <= row_bytes(policy.observation_space)
    algo.stop()
    with pytest.raises(ConfigError, match=r"DQNConfig\.model\.use_lstm=True: not supported"):
        DQNConfig(env="CartPole-v1", model={"use_lstm": True})


# -- custom models (RLlib's TorchModelV2 shape) ----------------------------------
class PortedModel(TorchModelV2, nn.Module):
    """An RLlib-style custom model: both base classes initialised explicitly."""

    def __init__(self, obs_space, action_space, num_outputs, model_config, name):
        TorchModelV2.__init__(self, obs_space, action_space, num_outputs, model_config, name)
        nn.Module.__init__(self)
        hidden = model_config["custom_model_config"].get("hidden", 16)
        self.body = nn.Sequential(nn.Linear(int(np.prod(obs_space.shape)), hidden), nn.ReLU())
        self.pi = nn.Linear(hidden, num_outputs)
        self.vf = nn.Linear(hidden, 1)
        self._features = None

    def forward(self, input_dict, state, seq_lens):
        self._features = self.body(input_dict["obs_flat"])
        return self.pi(self._features), state

    def value_function(self):
        return self.vf(self._features).squeeze(-1)


class NoValue(TorchModelV2):
    def __init__(self, obs_space, action_space, num_outputs, model_config, name):
        super().__init__(obs_space, action_space, num_outputs, model_config, name)
        self.pi = nn.Linear(int(np.prod(obs_space.shape)), num_outputs)

    def forward(self, input_dict, state, seq_lens):
        return self.pi(input_dict["obs_flat"]), state


@pytest.mark.parametrize("backend", ["local", RAY])
def test_a_registered_custom_model_trains_on_both_backends(backend, request):
    register_model("ported_test_model", PortedModel)
    algo = PPO(PPOConfig(env="CartPole-v1", num_workers=1, backend=_backend(backend, request),
                         seed=0, model={"custom_model": "ported_test_model",
                                        "custom_model_config": {"hidden": 8}},
                         rollout_fragment_length=32, train_batch_size=64,
                         sgd_minibatch_size=32, num_sgd_iter=1))
    try:
        algo.train()
        policy = algo.workers.local_worker().get_policy()
        assert type(policy.model) is PortedModel and policy.model.body[0].out_features == 8
    finally:
        algo.stop()


def test_custom_model_errors_name_the_model_at_build_time():
    with pytest.raises(ConfigError, match=r"model\.custom_model='NoValue': NoValue does not "
                                          r"implement value_function\(\)"):
        PPOPolicy(BOX, TWO, model={"custom_model": NoValue})
    with pytest.raises(ConfigError, match=r"model\.custom_model='nowhere': no model is "
                                          r"registered under that name"):
        PPOPolicy(BOX, TWO, model={"custom_model": "nowhere"})

    class Wrong(PortedModel):
        def forward(self, input_dict, state, seq_lens):
            out, state = super().forward(input_dict, state, seq_lens)
            return out[:, :1], state
    with pytest.raises(ConfigError, match=r"Wrong\.forward returned shape \(1, 1\) for one "
                                          r"observation; the action space Discrete\(2\) needs"):
        PPOPolicy(BOX, TWO, model={"custom_model": Wrong})


# -- spaces ----------------------------------------------------------------------
def test_multidiscrete_actions_and_dict_observations():
    policy = PPOPolicy(BOX, gym.spaces.MultiDiscrete([2, 3]), seed=0)
    actions, extra = policy.compute_actions(np.zeros((4, 3), np.float32))
    assert actions.shape == (4, 2) and extra[SB.ACTION_DIST_INPUTS].shape == (4, 5)
    assert (actions[:, 1] < 3).all()

    class DictEnv(gym.Env):
        observation_space = gym.spaces.Dict({"pos": gym.spaces.Box(-1, 1, (2,)),
                                             "mode": gym.spaces.Discrete(3)})
        action_space = gym.spaces.MultiDiscrete([2, 2])

        def reset(self, *, seed=None, options=None):
            super().reset(seed=seed)
            return self.observation_space.sample(), {}

        def step(self, action):
            return self.observation_space.sample(), float(action.sum()), False, False, {}

    worker = RolloutWorker(env=lambda cfg: gym.wrappers.TimeLimit(DictEnv(), 5),
                           policy=PPOPolicy, policy_config={"sgd_minibatch_size": 8},
                           num_envs=2, rollout_fragment_length=8, seed=0)
    batch = worker.sample()
    assert batch[SB.OBS].shape == (16, 5) and batch[SB.ACTIONS].shape == (16, 2)
    worker.learn_on_batch(batch)
    with pytest.raises(ConfigError, match=r"observation space Dict.* is not supported by a "
                                          r"policy directly"):
        PPOPolicy(DictEnv.observation_space, TWO)


def test_box_actions_with_a_cnn_and_an_lstm():
    space = gym.spaces.Box(0, 255, (2, 10, 10), np.uint8)
    policy = PPOPolicy(space, gym.spaces.Box(-1, 1, (2,)), seed=0,
                       model={"use_lstm": True, "lstm_cell_size": 8,
                              "lstm_use_prev_action": True})
    assert isinstance(policy.model, LSTMWrapper)
    state = [s[None].repeat(3, 0) for s in policy.get_initial_state()]
    actions, extra = policy.compute_actions(np.zeros((3, 2, 10, 10), np.uint8),
                                            state_batches=state)
    assert actions.shape == (3, 2) and extra["state_out_0"].shape == (3, 8)


def test_a_replay_buffer_larger_than_memory_is_refused_at_build_time(monkeypatch):
    import flowrl.replay.frames as frames
    monkeypatch.setattr(frames, "available_memory", lambda: 2**25)
    with pytest.raises(ConfigError, match=r"DQNConfig\.buffer_size=100000: the replay buffer "
                                          r"needs about 101 MiB \(1,056 bytes a row\), more "
                                          r"than the 32 MiB of memory available; use "
                                          r"buffer_size <= 31,775"):
        DQN(DQNConfig(env="flowrl/MinAtarBreakout-v0", buffer_size=100_000))
    # Pong under the DeepMind preprocessing gives frame stacks: one frame a row
    pytest.importorskip("ale_py")
    with pytest.raises(ConfigError, match=r"DQNConfig\.buffer_size=100000: the replay buffer "
                                          r"needs about 697 MiB \(7,312 bytes a row\).*"
                                          r"use buffer_size <= 4,588"):
        DQN(DQNConfig(env="ALE/Pong-v5", buffer_size=100_000))


# -- calling a model as RLlib's ModelV2.__call__ does --------------------------------
class Recorder(TorchModelV2):
    """Records the ``obs`` and ``obs_flat`` its forward gets."""

    def __init__(self, obs_space, action_space, num_outputs, model_config, name):
        super().__init__(obs_space, action_space, num_outputs, model_config, name)
        self.pi = nn.Linear(int(np.prod(obs_space.shape)), num_outputs)
        self.seen = None

    def forward(self, input_dict, state, seq_lens):
        self.seen = input_dict
        return self.pi(input_dict["obs_flat"]), state

    def value_function(self):
        return torch.zeros(len(self.seen["obs_flat"]))


@pytest.mark.parametrize("config", [
    {"fcnet_hiddens": (8,)}, {"fcnet_hiddens": (8,), "vf_share_layers": True},
    {"fcnet_hiddens": (8,), "use_lstm": True, "lstm_cell_size": 4}],
    ids=["mlp", "shared-mlp", "lstm"])
def test_a_model_called_with_only_obs_fills_obs_flat_as_rllib_does(config):
    torch.manual_seed(0)
    matrix = gym.spaces.Box(-1, 1, (2, 3), np.float32)
    model = get_model(matrix, TWO, 2, config)
    x = torch.randn(5, 2, 3)
    state = [torch.as_tensor(s)[None].repeat(5, 1) for s in model.get_initial_state()]
    seq_lens = torch.ones(5, dtype=torch.int64) if state else None
    with torch.no_grad():
        out, state_out = model({"obs": x}, state, seq_lens)
        values = model.value_function()
        rows = x.reshape(5, 6)  # what a policy gives: float32 rows, obs_flat filled in
        ref, ref_state = model({"obs": rows, "obs_flat": rows}, state, seq_lens)
        torch.testing.assert_close(out, ref)
        torch.testing.assert_close(values, model.value_function())
        assert [s.shape for s in state_out] == [s.shape for s in ref_state]


def test_the_model_sees_obs_in_its_spaces_dimensions_and_obs_flat_as_rows():
    matrix = gym.spaces.Box(-1, 1, (2, 3), np.float32)
    model = Recorder(matrix, TWO, 2, {}, "recorder")
    x = torch.randn(4, 2, 3)
    given = {"obs": x.reshape(4, 6)}
    out, _ = model(given, [], None)
    assert model.seen["obs"].shape == (4, 2, 3) and torch.equal(model.seen["obs"], x)
    assert torch.equal(model.seen["obs_flat"], x.reshape(4, 6))
    assert sorted(given) == ["obs"]  # the caller's dict is left as it was
    image = gym.spaces.Box(0, 255, (4, 42, 42), np.uint8)
    cnn = get_model(image, TWO, 2, {})
    frames = torch.zeros(3, 4, 42, 42, dtype=torch.uint8)
    assert cnn({"obs": frames}, [], None)[0].shape == (3, 2)
