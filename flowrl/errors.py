"""The one error hierarchy of flowrl.

Every error a user can see derives from :class:`FlowError`. Messages say what is
wrong, where (node id, parameter, field) and how to fix it.

>>> try:
...     raise ConfigError("gather_async(num_async=0): num_async must be >= 1")
... except ValueError as e:
...     print(type(e).__name__, e)
ConfigError gather_async(num_async=0): num_async must be >= 1
"""

from __future__ import annotations


class FlowError(Exception):
    """Base class of every flowrl error."""


class PlanError(FlowError):
    """A plan that cannot be built: cycles, misuse of stream kinds, dangling splits."""


class ConfigError(FlowError, ValueError):
    """A bad parameter or config field; the message names it and the fix."""


class OperatorError(FlowError):
    """An operator raised while the plan ran.

    ``node_id`` and ``label`` name the failing node. The original exception is
    chained as ``__cause__``; when it was raised in another process its formatted
    traceback is kept in ``remote_traceback`` (tracebacks do not cross processes).
    """

    def __init__(self, message: str, node_id: str = "", label: str = "",
                 remote_traceback: str = ""):
        super().__init__(message)
        self.node_id = node_id
        self.label = label
        self.remote_traceback = remote_traceback

    def __reduce__(self):
        # Crossing a process boundary drops __cause__ and tracebacks, so the cause's
        # formatted traceback travels as text.
        tb = self.remote_traceback
        if not tb and self.__cause__ is not None:
            import traceback
            cause = self.__cause__
            tb = "".join(traceback.format_exception(type(cause), cause, cause.__traceback__))
        return (type(self), (self.args[0] if self.args else "", self.node_id, self.label, tb))

    def __str__(self) -> str:
        text = super().__str__()
        if self.remote_traceback:
            text += "\n\nRemote traceback:\n" + self.remote_traceback.rstrip()
        return text


class WorkerError(FlowError):
    """A shard host (rollout worker, item source) died and could not be recovered."""


class EnvError(FlowError):
    """An env's constructor or ``reset`` raised while a rollout worker was built, or
    its ``step`` raised while the worker sampled.

    The message names the env and the worker index; the env's own exception is
    chained as ``__cause__`` (or quoted, when it was raised in another process).
    """


class DivergedError(FlowError):
    """A loss became NaN or infinite while training: the message names the loss, the
    policy and the training iteration. Training stops there, and the algorithm no
    longer saves checkpoints (its weights are not finite), so the last good
    checkpoint stays as it was."""


class TrialError(FlowError):
    """A Ray Tune trial of a flowrl algorithm failed (:mod:`flowrl.tune`). The
    message is flowrl's one-line reason, the type and first line of the original
    error, which is chained as ``__cause__``."""


__all__ = ["FlowError", "PlanError", "ConfigError", "OperatorError", "WorkerError", "EnvError",
           "DivergedError", "TrialError"]
