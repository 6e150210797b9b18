# What one Ray actor costs the machine to start (CPU-seconds of the whole session, /proc):
# a bare actor, one that imports torch, and PPO with 2 Ray rollout workers.
# python benchmarks/results/suite-20261207/actor_start_cpu.py (idle machine)
import os, sys, time
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
import harness, ray
ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
tree = harness.TreeCpu([os.getpid()])
from flowrl.algorithms.ppo import PPO, PPOConfig
@ray.remote(num_cpus=0)
class Bare:
    def ping(self): return 1
@ray.remote(num_cpus=0)
class Torch:
    def __init__(self):
        import torch
    def ping(self): return 1
for name, make in [("bare", lambda: [Bare.remote() for _ in range(4)]), ("torch", lambda: [Torch.remote() for _ in range(4)])]:
    c0 = tree.read(); hs = make(); ray.get([h.ping.remote() for h in hs]); c1 = tree.read()
    print(name, "CPU-s per actor %.2f" % ((c1 - c0) / 4)); [ray.kill(h) for h in hs]
    time.sleep(1)
c0 = tree.read(); p = PPO(PPOConfig(env="CartPole-v1", num_workers=2, backend="ray", num_cpus_per_worker=0, seed=0)); c1 = tree.read()
print("PPO 2 ray workers: CPU-s %.2f" % (c1 - c0)); p.stop()
