"""How visible the Pong ball stays after the DeepMind resize: its contrast over the
background in the raw grayscale screen and in frames resized to each ``--sizes``.

The resize is the one ``gymnasium.wrappers.AtariPreprocessing`` applies to ALE's
grayscale screen (``cv2.INTER_AREA``), which flowrl's Atari envs use
(``flowrl/envs/atari.py``). The ball is found in the RGB screen by its colour; its
contrast at a size is the brightest pixel of the 3x3 window around its resized
position minus the background's grey level (the playfield's median); that window
can take in a paddle or a wall beside the ball, so read the medians. A ball of low
contrast in small frames is one reason a CNN could learn Pong more slowly per step
on them; ``docs/benchmarks.md#atari-learning`` has the PPO run that tested it.

Deterministic (random actions from each seed); it times nothing, so of the harness
options only ``--seeds``, ``--first-seed``, ``--quick`` (300 frames) and
``--results-dir`` apply. The raw figures go to ``benchmarks/results/pong_ball-*.json``.

    python benchmarks/pong_ball.py
    python benchmarks/pong_ball.py --sizes 84 64 42 --frames 2000 --seeds 3
"""

from __future__ import annotations

import argparse
import json
import sys
import time

import numpy as np

import harness

BALL_RGB = 236  # the Pong ball is (236, 236, 236); nothing else on the playfield is
PLAYFIELD = slice(34, 194)  # rows between the score and the bottom wall


def contrasts(sizes: list[int], frames: int, every: int, seed: int) -> dict[str, list[int]]:
    """Ball contrast per sampled frame: ``{"raw": [...], "84": [...], ...}``."""
    import ale_py
    import cv2
    import gymnasium as gym
    gym.register_envs(ale_py)
    env = gym.make("ALE/Pong-v5", frameskip=1, repeat_action_probability=0.0, obs_type="rgb")
    env.reset(seed=seed)
    rng = np.random.default_rng(seed)
    out: dict[str, list[int]] = {"raw": [], **{str(s): [] for s in sizes}}
    for t in range(frames):
        rgb, *_ = env.step(int(rng.integers(env.action_space.n)))
        if t % every:
            continue
        ys, xs = np.nonzero(np.all(rgb[PLAYFIELD] == BALL_RGB, axis=-1))
        if not len(ys):
            continue  # between points: no ball on screen
        gray = env.unwrapped.ale.getScreenGrayscale()
        background = int(np.median(gray[PLAYFIELD]))
        out["raw"].append(int(gray[PLAYFIELD][ys, xs].max()) - background)
        height, width = gray.shape
        for s in sizes:
            small = cv2.resize(gray, (s, s), interpolation=cv2.INTER_AREA).astype(int)
            y = int((PLAYFIELD.start + ys.mean()) * s / height)
            x = int(xs.mean() * s / width)
            out[str(s)].append(int(small[max(0, y - 1):y + 2, max(0, x - 1):x + 2].max())
                               - background)
    env.close()
    return out


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sizes", type=int, nargs="+", default=[84, 42])
    p.add_argument("--frames", type=int, default=3000, help="emulator frames to step")
    p.add_argument("--every", type=int, default=23, help="sample one frame in this many")
    harness.add_arguments(p, default_seeds=1)  # run_all.sh passes its options on
    args = p.parse_args(argv)
    if min(args.sizes) < 8 or args.frames < 1 or args.every < 1:
        p.error("--sizes must be >= 8, --frames and --every >= 1")
    s = harness.settings_from(args)
    frames = min(args.frames, 300) if s.quick else args.frames
    found: dict[str, list[int]] = {}
    for seed in s.seeds:
        for name, values in contrasts(args.sizes, frames, args.every, seed).items():
            found.setdefault(name, []).extend(values)
    print(f"Pong ball contrast over the background (grey levels), {len(found['raw'])} frames "
          f"with a ball, seeds {s.seeds}: median [min-max]")
    print("frame | contrast")
    print("------|---------")
    for name, values in found.items():
        label = "raw 210x160" if name == "raw" else f"{name}x{name}"
        if values:
            print(f"{label} | {int(np.median(values))} [{min(values)}-{max(values)}]")
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    s.results_dir.mkdir(parents=True, exist_ok=True)
    path = harness.reserve_path(s.results_dir, "pong_ball", stamp)
    path.write_text(json.dumps({"benchmark": "pong_ball", "started_utc": stamp, "argv": sys.argv,
                                "commit": harness.git_commit(), "seeds": s.seeds,
                                "frames": frames, "every": args.every, "contrast": found},
                               indent=1))
    print(f"raw results: {path}")


if __name__ == "__main__":
    main()
