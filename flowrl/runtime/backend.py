"""What a backend is: how a shard is hosted and how a request to it is submitted.

The driver runtime (``runtime/driver.py``) is the same for every backend; it only
calls the methods below. A *request* asks one shard for up to ``n`` items and
resolves to ``(items, ended)``. Requests to the same shard complete in submission
order (a host serves one request at a time).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from flowrl.errors import WorkerError
from flowrl.runtime.stages import FusedStage


def host_lost(error: WorkerError, reason: str) -> WorkerError:
    """Mark ``error`` as "the shard's host is gone or stuck" (``reason``: why).

    Only such errors are recovered by a shard's ``restart``; any other error (an
    operator raising on the host) ends the run as before.
    """
    error.host_lost = reason
    return error


def lost_reason(error: BaseException) -> str | None:
    """Why the host behind ``error`` was lost, or None if ``error`` is not a lost host."""
    return getattr(error, "host_lost", None)


@dataclass(eq=False)
class Shard:
    """One shard as one run sees it: a host, the run's key on it, and labels."""

    host: Any                 # backend handle: in-process object or Ray actor handle
    key: str                  # the install key of this run's consumer on the host
    label: str                # "<source id>[<index>]" for messages and stats
    stage: FusedStage
    #: What replaces a lost host: ``recovery.replace(index, dead, reason, lost)``
    #: (:mod:`flowrl.runtime.recovery`); None: a loss is a WorkerError
    recovery: Any = None
    index: int = 0            # the shard's index in its source

    @property
    def actor(self) -> Any:
        """What ``zip_with_source_actor`` yields and ``current_actor`` holds."""
        return self.host


class Request:
    """One pull of up to ``n`` items from ``shard``; ``result()`` is ``(items, ended)``."""

    __slots__ = ("shard", "n", "done", "_value", "_error")

    def __init__(self, shard: Shard, n: int):
        self.shard = shard
        self.n = n
        self.done = False
        self._value: tuple[list, bool] | None = None
        self._error: BaseException | None = None

    def set_result(self, value: tuple[list, bool]) -> None:
        self.done, self._value = True, value

    def set_error(self, error: BaseException) -> None:
        self.done, self._error = True, error

    @property
    def error(self) -> BaseException | None:
        """What the request failed with (None: it succeeded, or is not done)."""
        return self._error

    def result(self) -> tuple[list, bool]:
        if self._error is not None:
            raise self._error
        return self._value

    def release(self) -> None:
        """Let go of what the backend still holds for this done request (a Ray
        object reference); its result stays. The driver calls it once it has sent
        the requests that follow, so that the cost falls while the hosts work on
        those (``runtime/ray_backend.py``, "Requests"). In-process: nothing."""


class Backend:
    """Base class; see :class:`~flowrl.runtime.local_backend.LocalBackend`."""

    name = "base"
    #: Seconds a remote host may leave a request unanswered (None: unbounded / in-process).
    remote_timeout_s: float | None = None
    #: Whether a wait blocks on hosts outside this process. Then, on the event loop, a
    #: wait that finds nothing ready runs on the run's I/O thread while other tasks
    #: share the loop (:func:`~flowrl.runtime.context.call_blocking`). False: a wait
    #: runs the (in-process) hosts themselves, in the caller's thread.
    remote_waits = False

    def make_item_host(self, source: Any, repeat: bool, options: dict | None = None,
                       label: str = "") -> Any:
        """A host replaying ``source`` (forever if ``repeat``); ``options``: actor options
        from the plan's annotations (``num_cpus``, ``resources``); ``label`` names it."""
        raise TypeError(f"{type(self).__name__} must implement make_item_host")

    def make_aggregator_host(self, spec: Any, options: dict | None = None,
                             label: str = "") -> Any:
        """A host running an aggregator's sub-plan; ``options``/``label`` as
        :meth:`make_item_host`."""
        raise TypeError(f"{type(self).__name__} must implement make_aggregator_host")

    def install(self, shards: list[Shard], replacing: bool = False) -> None:
        raise TypeError(f"{type(self).__name__} must implement install")

    def begin_install(self, shard: Shard) -> Request:
        """Start installing ``shard``'s stage on its just-created replacement host.

        Returns a request the gathers wait for with their other requests (so the
        shards that still run are served while the replacement starts); hand it to
        :meth:`end_install` once done. This default installs at once (in-process
        hosts start immediately) and returns a done request.
        """
        self.install([shard], replacing=True)
        req = Request(shard, 0)
        req.set_result(None)
        return req

    def end_install(self, request: Request) -> None:
        """Finish :meth:`begin_install`: raise what the install raised (a replacement
        lost while it started raises a lost-host WorkerError)."""
        request.result()

    def submit(self, shard: Shard, n: int) -> Request:
        raise TypeError(f"{type(self).__name__} must implement submit")

    def wait_all(self, requests: list[Request]) -> None:
        """Return once every request is done (errors are raised by ``result()``).

        This blocks the calling thread: with :attr:`remote_waits` the driver calls it
        through :func:`~flowrl.runtime.context.call_blocking` when it runs on the
        event loop."""
        raise TypeError(f"{type(self).__name__} must implement wait_all")

    def wait_any(self, queues: list[Sequence[Request]], polled: bool = False) -> None:
        """Return once the first request of some queue is done, with every first
        request that is ready by then marked done (the driver chooses among them).
        Blocks as :meth:`wait_all` does. ``polled``: :meth:`poll_any` has just
        found none done (a backend may skip repeating its work).

        ``queues`` holds one queue per shard with a pending request: that shard's
        pending requests in submission order (the order they complete in).
        """
        raise TypeError(f"{type(self).__name__} must implement wait_any")

    def poll_any(self, queues: list[Sequence[Request]]) -> bool:
        """:meth:`wait_any` without blocking: mark what is ready done, and say whether
        the first request of some queue is done now. Only a backend with
        :attr:`remote_waits` is ever polled."""
        raise TypeError(f"{type(self).__name__} must implement poll_any")

    def forget(self, shard: Shard) -> None:
        """Drop what the backend keeps for ``shard`` (its host is being replaced)."""

    def end_host(self, host: Any) -> None:
        """End a host that died or went silent (Ray: ``ray.kill``; in-process: nothing)."""

    def release(self, shards: list[Shard]) -> None:
        """Uninstall the run's stages from hosts that outlive the run."""
        raise TypeError(f"{type(self).__name__} must implement release")

    def item_counts(self, shards: list[Shard]) -> list[dict[str, int]]:
        """Per shard, the items each of its shard-local nodes emitted (for stats)."""
        raise TypeError(f"{type(self).__name__} must implement item_counts")

    def destroy(self, hosts: list[Any]) -> None:
        """End hosts the run created (item hosts, aggregators)."""
        raise TypeError(f"{type(self).__name__} must implement destroy")

    def stop(self) -> None:
        """Release whatever the backend itself holds."""
