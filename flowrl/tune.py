"""Ray Tune integration: a flowrl algorithm as a Tune trainable.

``trainable(ALGO)`` (a name such as ``"ppo"`` or an Algorithm class) returns a
``ray.tune.Trainable`` subclass named after the algorithm. Tune hands each trial
its config dict (``param_space`` resolved: the algorithm config's fields plus
``env``) and the trainable:

- ``setup(config)`` builds the algorithm from it, validated as ``flowrl train
  --config`` validates (:func:`flowrl.experiment.make_config`: an unknown field is a
  ConfigError naming it and the closest valid one);
- ``step()`` is one ``algo.train()``; the result dict goes to Tune with numpy
  values as Python numbers (NaN stays a float, so a metric is never missing);
- ``save_checkpoint(dir)`` / ``load_checkpoint(dir)`` are flowrl's own atomic
  :meth:`~flowrl.algorithms.Algorithm.save` / ``restore`` into ``dir/algorithm``,
  so weights, optimizer state, RNGs and counters (``timesteps_total``,
  ``training_iteration``, ``episodes_total``) round-trip. A trial restored from its
  own checkpoint (``Tuner.restore``, a paused ASHA/PBT trial) continues counting;
  one restored from another trial's (PBT's ``exploit``) takes that trial's state,
  except the learning rate: ``restore`` sets the trial's own ``lr`` (what PBT
  mutated) on the optimizer, unless the config has an ``lr_schedule``, whose
  rate at the restored step count stays. Outside Tune,
  :meth:`Algorithm.from_checkpoint <flowrl.algorithms.Algorithm.from_checkpoint>`,
  ``flowrl evaluate`` and ``flowrl export`` take a trial's checkpoint directory
  (``<trial>/checkpoint_NNNNNN``) or the trial's directory (its latest checkpoint);
- ``reset_config(new)`` rebuilds the algorithm (``reuse_actors=True``);
  ``cleanup()`` stops it and its workers.

Resources. ``default_resource_request(config)`` is a placement group with one
bundle for the trial's driver (the learner: 1 CPU, plus ``num_gpus`` GPUs) and,
on the Ray backend, one bundle of ``num_cpus_per_worker`` CPUs per remote rollout
worker and per remote evaluation worker. Tune reserves the whole group before it
starts a trial, and the rollout workers the trial creates are placed in it (Tune
sets ``placement_group_capture_child_tasks``), so trials never wait on each
other's workers (ray-project/ray#14621). On the local backend the workers live in
the trial's own process and the group is the one bundle.

Failures. A flowrl error in ``setup`` or ``step`` fails the trial with flowrl's
one-line reason (the first line of the error: the type and what to fix) as the
trial's error; other trials go on.

The Algorithm classes themselves are not Tune trainables (that would make every
``import flowrl`` import ``ray.tune``): pass ``flowrl.tune.trainable(PPO)`` where
RLlib code passes ``PPO``.

>>> from flowrl.tune import trainable
>>> PPO = trainable("ppo")
>>> PPO.__name__, PPO.algorithm_class.name
('PPO', 'ppo')
>>> pgf = PPO.default_resource_request({"env": "CartPole-v1", "backend": "ray",
...                                      "num_workers": 2})
>>> pgf.bundles, pgf.strategy
([{'CPU': 1.0}, {'CPU': 1.0}, {'CPU': 1.0}], 'PACK')
"""

from __future__ import annotations

import os
from typing import Any, ClassVar

try:
    from ray import tune
except ImportError as e:  # pragma: no cover - ray[tune] is a dependency of the extra
    raise ImportError("flowrl.tune needs Ray Tune: pip install 'flowrl[tune]' "
                      f"(importing ray.tune failed: {e})") from e

from flowrl.checkpoint import TUNE_SUBDIR
from flowrl.errors import ConfigError, FlowError, TrialError

#: The subdirectory of a Tune checkpoint directory that holds flowrl's checkpoint
#: (:data:`flowrl.checkpoint.TUNE_SUBDIR`, where checkpoint discovery looks for it).
CHECKPOINT_SUBDIR = TUNE_SUBDIR


def _field(cls: type, config: dict, name: str) -> Any:
    """``config[name]``, else the config class's default for it."""
    import dataclasses
    if name in config:
        return config[name]
    for f in dataclasses.fields(cls.config_class):
        if f.name == name:
            if f.default is not dataclasses.MISSING:
                return f.default
            return f.default_factory()  # type: ignore[misc]
    return None


def _amount(value: Any, default: float) -> float:
    """``value`` as a resource amount >= 0; ``default`` for anything else (a bad
    value fails the trial in ``setup`` with the config's own message)."""
    if (isinstance(value, bool) or not isinstance(value, (int, float))
            or not 0 <= value < float("inf")):
        return default
    return float(value)


def bundles(algorithm_class: type, config: dict) -> list[dict[str, float]]:
    """The placement group bundles of one trial of ``algorithm_class`` with trial
    config ``config`` (see the module docstring; fields missing from ``config``
    take the config class's defaults).

    >>> from flowrl.algorithms import PPO
    >>> bundles(PPO, {"backend": "ray", "num_workers": 1, "num_cpus_per_worker": 2,
    ...               "evaluation_interval": 1, "evaluation_num_workers": 1})
    [{'CPU': 1.0}, {'CPU': 2.0}, {'CPU': 2.0}]
    >>> bundles(PPO, {"num_workers": 4})  # the local backend: workers in the trial's process
    [{'CPU': 1.0}]
    """
    head = {"CPU": 1.0}
    gpus = _amount(_field(algorithm_class, config, "num_gpus"), 0.0)
    if gpus:
        head["GPU"] = gpus
    out = [head]
    if _field(algorithm_class, config, "backend") != "ray":
        return out
    per_worker = _amount(_field(algorithm_class, config, "num_cpus_per_worker"), 1.0)
    remotes = _amount(_field(algorithm_class, config, "num_workers"), 0.0)
    if _field(algorithm_class, config, "evaluation_interval") is not None:
        remotes += _amount(_field(algorithm_class, config, "evaluation_num_workers"), 0.0)
    if per_worker > 0:  # a worker that asks for no CPU needs no bundle
        out += [{"CPU": per_worker} for _ in range(int(remotes))]
    return out


def _algorithm_class(algo: Any) -> type:
    from flowrl.algorithms import Algorithm
    from flowrl.experiment import algorithm_class
    if isinstance(algo, type):
        if not issubclass(algo, Algorithm):
            raise ConfigError(f"trainable({algo.__name__}): give an algorithm name such as "
                              "'ppo' or a flowrl Algorithm class")
        return algo
    return algorithm_class(algo)


def one_line(error: BaseException) -> str:
    """flowrl's one-line reason for ``error``: its type and the first line of its
    message (a remote traceback, if any, is left out).

    >>> one_line(ConfigError("PPOConfig.lr=-1: must be a number in (0, 10]\\nmore"))
    'ConfigError: PPOConfig.lr=-1: must be a number in (0, 10]'
    """
    text = str(error).strip()
    return f"{type(error).__name__}: {text.splitlines()[0] if text else ''}".rstrip(": ")


class FlowRLTrainable(tune.Trainable):
    """The Tune trainable of one flowrl algorithm; use :func:`trainable` to get the
    subclass for an algorithm (this base has none). See the module docstring."""

    #: The flowrl Algorithm class this trainable builds (set by :func:`trainable`).
    algorithm_class: ClassVar[type | None] = None
    #: Passed to ``Algorithm.restore``: load checkpoints whose extra state was pickled.
    allow_pickle: ClassVar[bool] = False

    @classmethod
    def default_resource_request(cls, config: dict) -> tune.PlacementGroupFactory:
        return tune.PlacementGroupFactory(bundles(cls._algo_class(), dict(config or {})),
                                          strategy="PACK")

    @classmethod
    def _algo_class(cls) -> type:
        if cls.algorithm_class is None:
            raise ConfigError(f"{cls.__name__} has no algorithm; use "
                              "flowrl.tune.trainable('ppo') (or an Algorithm class)")
        return cls.algorithm_class

    def _build(self, config: dict) -> None:
        from flowrl.experiment import make_config
        cls = self._algo_class()
        try:
            self.algo = cls(make_config(cls, dict(config)))
        except FlowError as e:
            raise TrialError(one_line(e)) from e

    def setup(self, config: dict) -> None:
        self.algo = None
        self._build(config)

    def step(self) -> dict:
        from flowrl.loggers import jsonable
        try:
            result = self.algo.train()
        except FlowError as e:
            raise TrialError(one_line(e)) from e
        return jsonable(result, keep_nan=True)

    def save_checkpoint(self, checkpoint_dir: str) -> None:
        self.algo.save(os.path.join(checkpoint_dir, CHECKPOINT_SUBDIR))

    def load_checkpoint(self, checkpoint: Any) -> None:
        if not isinstance(checkpoint, str):
            raise ConfigError(f"{type(self).__name__}.load_checkpoint: expected a checkpoint "
                              "directory written by save_checkpoint, got "
                              f"{type(checkpoint).__name__}")
        path = os.path.join(checkpoint, CHECKPOINT_SUBDIR)
        if not os.path.isdir(path):
            raise ConfigError(f"{type(self).__name__}.load_checkpoint({checkpoint!r}): no "
                              f"{CHECKPOINT_SUBDIR}/ inside; it was not written by a flowrl "
                              "trainable")
        self.algo.restore(path, allow_pickle=self.allow_pickle)

    def reset_config(self, new_config: dict) -> bool:
        if self.algo is not None:
            self.algo.stop()
            self.algo = None
        self._build(new_config)
        return True

    def cleanup(self) -> None:
        if getattr(self, "algo", None) is not None:
            self.algo.stop()
            self.algo = None


_TRAINABLES: dict[tuple[type, bool], type] = {}


def trainable(algo: Any, *, allow_pickle: bool = False) -> type:
    """The ``ray.tune.Trainable`` subclass for ``algo`` (a registered name such as
    ``"ppo"``, case-insensitive, or a flowrl Algorithm class), named after it; the
    same class for the same arguments. ``allow_pickle`` lets ``load_checkpoint``
    read checkpoints whose extra state was pickled (``user_state.pkl``): only for
    experiments you trust. See the module docstring.

    >>> trainable("ppo") is trainable("PPO")
    True
    >>> trainable("pop")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    flowrl.errors.ConfigError: unknown algorithm 'pop'; did you mean 'ppo'? (choose one of [...])
    """
    cls = _algorithm_class(algo)
    key = (cls, bool(allow_pickle))
    if key not in _TRAINABLES:
        name = cls.__name__
        _TRAINABLES[key] = type(name, (FlowRLTrainable,), {
            "algorithm_class": cls, "allow_pickle": bool(allow_pickle),
            "__module__": __name__, "__qualname__": name,
            "__doc__": f"{name} as a Ray Tune trainable (flowrl.tune.trainable)."})
    return _TRAINABLES[key]


__all__ = ["trainable", "bundles", "one_line", "FlowRLTrainable", "TrialError",
           "CHECKPOINT_SUBDIR"]
