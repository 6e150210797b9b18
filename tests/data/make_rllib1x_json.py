"""Writes the RLlib 1.x JSON fixtures in tests/data/rllib1x/ (run once; the files are
committed). They are made by hand, line by line, the way RLlib 1.x's JSON writer made
its output, with no flowrl code:

- one JSON object per line: ``{"type": "SampleBatch", column: value, ...}`` or
  ``{"type": "MultiAgentBatch", "count": N, "policy_batches": {pid: {...}}}``;
- ``obs`` and ``new_obs`` packed: the numpy array pickled (as numpy 1.x under
  ray.cloudpickle pickled it: classes named under ``numpy.core``), compressed with
  ``lz4.frame`` and base64-encoded; every other column a JSON list;
- RLlib 1.x's columns: one ``dones`` flag, ``infos`` (dicts; a time limit says
  ``"TimeLimit.truncated": true``), ``action_prob``, ``unroll_id``, ...

The first record's arrays are pickled with protocol 4 (RLlib on Python 3.7:
``numpy.core.multiarray._reconstruct``), the second's with protocol 5 (Python 3.8+:
``numpy.core.numeric._frombuffer``).

    python tests/data/make_rllib1x_json.py
"""

from __future__ import annotations

import base64
import json
import os
import pickle
import pickletools

import gymnasium as gym
import lz4.frame
import numpy as np

HERE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "rllib1x")


def numpy1_pickle(array: np.ndarray, protocol: int) -> bytes:
    """``array`` pickled as numpy 1.x pickled it: this numpy's pickle with the FRAME
    opcodes dropped (framing is optional) and ``numpy._core`` renamed ``numpy.core``."""
    data = pickle.dumps(array, protocol=protocol)
    ops = list(pickletools.genops(data))
    ends = [pos for _, _, pos in ops[1:]] + [len(data)]
    out = bytearray()
    for (op, arg, pos), end in zip(ops, ends):
        chunk = data[pos:end]
        if op.name == "FRAME":
            continue
        if op.name == "SHORT_BINUNICODE" and arg.startswith("numpy._core"):
            name = arg.replace("numpy._core", "numpy.core").encode()
            chunk = bytes([chunk[0], len(name)]) + name
        out += chunk
    return bytes(out)


def pack(array: np.ndarray, protocol: int) -> str:
    return base64.b64encode(lz4.frame.compress(numpy1_pickle(array, protocol))).decode("ascii")


def episode_rows(env: gym.Env, rng: np.random.Generator, seed: int, n: int):
    obs, _ = env.reset(seed=seed)
    rows = []
    for t in range(n):
        action = int(rng.integers(2))
        new_obs, reward, terminated, truncated, _ = env.step(action)
        rows.append((obs, action, float(reward), bool(terminated), new_obs, t))
        obs = new_obs
        if terminated:
            break
    return rows


def record(rows, eps_ids, dones, limits, protocol: int) -> dict:
    obs = np.asarray([r[0] for r in rows], np.float32)
    new_obs = np.asarray([r[4] for r in rows], np.float32)
    n = len(rows)
    return {
        "type": "SampleBatch",
        "obs": pack(obs, protocol),
        "new_obs": pack(new_obs, protocol),
        "actions": [r[1] for r in rows],
        "rewards": [r[2] for r in rows],
        "dones": dones,
        "eps_id": eps_ids,
        "unroll_id": [0] * n,
        "agent_index": [0] * n,
        "t": [r[5] for r in rows],
        "action_prob": [0.5] * n,
        "action_logp": [float(np.log(0.5))] * n,
        "infos": [{"TimeLimit.truncated": True} if limit else {} for limit in limits],
        "prev_actions": [0] + [r[1] for r in rows[:-1]],
        "prev_rewards": [0.0] + [r[2] for r in rows[:-1]],
    }


def main() -> None:
    os.makedirs(HERE, exist_ok=True)
    env = gym.make("CartPole-v1")
    rng = np.random.default_rng(0)
    first = episode_rows(env, rng, 0, 500)            # ends by termination
    second = episode_rows(env, rng, 1, 6)             # stopped by a (6-step) time limit
    a = first + second[:3]
    b = second[3:]
    lines = [
        record(a, [100] * len(first) + [101] * 3,
               [False] * (len(first) - 1) + [True] + [False] * 3,
               [False] * len(a), protocol=4),
        record(b, [101] * len(b), [False] * (len(b) - 1) + [True],
               [False] * (len(b) - 1) + [True], protocol=5),
    ]
    with open(os.path.join(HERE, "cartpole.json"), "w") as f:
        for line in lines:
            f.write(json.dumps(line) + "\n")
    # a multi-agent record: two policies, the obs packed, count = env steps
    ma = record(first[:4], [200] * 4, [False] * 4, [False] * 4, protocol=5)
    mb = record(first[:4], [200] * 4, [False] * 4, [False] * 4, protocol=4)
    for rec, agent in ((ma, 0), (mb, 1)):
        rec.pop("type")
        rec["agent_index"] = [agent] * 4
    with open(os.path.join(HERE, "multiagent.json"), "w") as f:
        f.write(json.dumps({"type": "MultiAgentBatch", "count": 4,
                            "policy_batches": {"p0": ma, "p1": mb}}) + "\n")


if __name__ == "__main__":
    main()
