"""The one minibatch-SGD loop every trainer uses.

:func:`minibatch_sgd` runs ``num_sgd_iter`` epochs over minibatches of a batch and
calls ``step(minibatch)`` once per minibatch (one optimizer step). The policy's
``learn_on_batch``, :class:`~flowrl.ops.TrainOneStep`,
:class:`~flowrl.ops.MultiGPUTrainOneStep`, :class:`~flowrl.ops.LearnerThread` and
DD-PPO's workers all call it; they differ only in the ``step`` they pass (one
model, towers on several devices, or gradients all-reduced among processes) and
in where their settings come from.
"""

from __future__ import annotations

from typing import Any, Callable

import numpy as np

from flowrl.errors import ConfigError

#: Where PPO standardizes advantages: once per train batch (``"batch"``, the plan
#: does it) or in every SGD step over its minibatch (``"minibatch"``, the policy
#: does it). Here, beside the SGD loop and free of torch, so that a config validates
#: without importing torch.
STANDARDIZE_ADVANTAGES = ("batch", "minibatch")


def mean_stats(stats: list[dict[str, float]]) -> dict[str, float]:
    """Key-wise mean of a list of stats dicts (keys missing from some rows are skipped).

    >>> mean_stats([{"kl": 1.0, "loss": 2.0}, {"kl": 3.0, "loss": 4.0}])
    {'kl': 2.0, 'loss': 3.0}
    """
    if not stats:
        return {}
    keys = [k for k in stats[0] if all(k in s for s in stats)]
    return {k: float(np.mean([s[k] for s in stats])) for k in keys}


def check_sgd(where: str, num_sgd_iter: Any, sgd_minibatch_size: Any) -> None:
    """ConfigError naming ``where`` unless ``num_sgd_iter >= 1`` and
    ``sgd_minibatch_size >= 0`` are ints (0 or None: the whole batch)."""
    if isinstance(num_sgd_iter, bool) or not isinstance(num_sgd_iter, int) or num_sgd_iter < 1:
        raise ConfigError(f"{where}(num_sgd_iter={num_sgd_iter!r}): must be an int >= 1")
    if sgd_minibatch_size is None:
        return
    if (isinstance(sgd_minibatch_size, bool) or not isinstance(sgd_minibatch_size, int)
            or sgd_minibatch_size < 0):
        raise ConfigError(f"{where}(sgd_minibatch_size={sgd_minibatch_size!r}): must be an int "
                          ">= 0 (0: the whole batch)")


def minibatch_sgd(batch, *, num_sgd_iter: int, sgd_minibatch_size: int | None,
                  rng: np.random.Generator | int | None,
                  step: Callable[[Any], dict[str, float]]) -> dict[str, float]:
    """``num_sgd_iter`` epochs of ``step(minibatch)`` over ``batch``; the mean stats of
    the last epoch (as RLlib 1.x).

    ``batch`` is anything with ``count`` and ``minibatches(size, seed=, shuffle=)``
    (a :class:`~flowrl.batch.SampleBatch`, or a policy's loaded tensors). Minibatches
    hold ``sgd_minibatch_size`` rows (0 or None: the whole batch, unshuffled); they
    are reshuffled every epoch with ``rng`` when smaller than the batch.

    >>> from flowrl.batch import SampleBatch
    >>> seen = []
    >>> stats = minibatch_sgd(SampleBatch(t=np.arange(6)), num_sgd_iter=2, sgd_minibatch_size=4,
    ...                       rng=0, step=lambda mb: seen.append(mb.count) or {"n": mb.count})
    >>> seen, stats
    ([4, 2, 4, 2], {'n': 3.0})
    """
    check_sgd("minibatch_sgd", num_sgd_iter, sgd_minibatch_size)
    if batch.count == 0:
        raise ConfigError("minibatch_sgd got an empty batch; train on batches with rows")
    size = min(sgd_minibatch_size, batch.count) if sgd_minibatch_size else batch.count
    rng = np.random.default_rng(rng) if not isinstance(rng, np.random.Generator) else rng
    epoch: list[dict[str, float]] = []
    for _ in range(num_sgd_iter):
        epoch = [step(mb) for mb in batch.minibatches(size, seed=rng, shuffle=size < batch.count)]
    return mean_stats(epoch)


__all__ = ["minibatch_sgd", "mean_stats", "check_sgd", "STANDARDIZE_ADVANTAGES"]
