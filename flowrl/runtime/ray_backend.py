"""The Ray backend: shard hosts are Ray actors and a request is one actor call.

This is the only module that talks to Ray actors directly: the rest of flowrl
calls actors through :class:`RayCalls` (at the end of this module).

Policy:

- Hosts. ``from_items``/``from_range``/``from_iterators`` shards get one
  :class:`~flowrl.runtime.shard_host.ItemsHost` actor each, created with
  ``num_cpus=0``, placed round-robin over the alive nodes (hard node affinity).
  Such a host only replays data the driver already had, so it should never wait
  for a CPU (a plan with more shards than cluster CPUs must still start, and a
  test session on 2 CPUs must not starve); round-robin placement puts its
  shard-local work on every node of a cluster (Ray's ``SPREAD`` and soft
  affinity are best effort and can leave a node out).
  Work that needs a real CPU budget belongs on user actors (``from_actors``),
  whose resources their creator chose. Aggregators are ``AggregatorHost`` actors
  with ``num_cpus=0`` pinned to the driver's node (hard node affinity); each runs
  its sub-plan with this backend inside the actor. A plan may annotate its graph
  with ``num_cpus``/``resources`` for these hosts (``runtime/compile.py``): they
  become the actors' options, and placement keeps to the nodes that have them. Actors the user passed in
  (``from_actors``) are adopted: never killed, only this run's stage is
  uninstalled from them.
- Requests. ``submit`` is one plain actor call. One item of a run that is its
  host's default (the host's first run, see ``runtime/shard_host.py``; always so
  for the hosts a run creates) is ``host.flowrl_next.remote()``, with no
  arguments, since each argument is serialized by the driver and read by the
  actor: with the run's key gone from the call, the gathers moved from 0.72-0.91x
  to 0.85-0.95x the items/s of a hand-written Ray loop
  (``benchmarks/ray_overhead.py``, docs/benchmarks.md "Runtime overhead"). Its
  reply is the item alone, not ``([item], False)``, for the same reason (the
  request wraps it on the driver). Any other pull is
  ``host.flowrl_pull.remote(key, n)``. A done request keeps its object
  reference until the driver has sent the request that follows on its shard
  (the next round, or a pass's resubmission) and releases it
  (``Request.release``; a failed request lets go at once): dropping the last reference to a reply costs the
  driver 16-19 us of Ray's reference counting (``benchmarks/ray_overhead.py
  --paired`` measures it), which then falls while the hosts work, not between a
  reply and the next request.
  Nothing sleeps or polls. The waits block the calling thread (``remote_waits``):
  on the driver's event loop they run through
  :func:`~flowrl.runtime.context.call_blocking`, elsewhere directly (see
  ``driver.py``).
  ``wait_any`` (async gathers) first sweeps every pending ref without blocking
  (``ray.wait(timeout=0)``, which ``poll_any`` does alone); only if no shard's
  oldest request is ready does it
  block, in one ``ray.wait`` for one of those oldest requests, and collect what it
  returned. Every ready result a sweep finds is fetched with one ``ray.get`` and
  marked done, so the driver sees every shard that has answered and can serve
  them fairly (least recently served first, see ``driver.py``); shards that
  answer during a blocking wait are seen by the next pass's sweep. Replies may be
  processed out of order, so a request is marked done only once the earlier
  requests to its shard are (the driver relies on per-shard completion order).
  ``wait_all`` (a sync round, submitted just before) is one blocking
  ``ray.get`` over the round, which waits and fetches in one call.
- Bounds. Every wait on a remote host is bounded by ``remote_timeout_s``
  (``plan.compile(remote_timeout_s=...)``): a shard's oldest pending request
  counts from when it was submitted or the shard's previous reply came, whichever
  is later; once one has gone unanswered that long, the run fails with a
  :class:`~flowrl.errors.WorkerError` naming the stuck shard and the setting,
  even while other shards keep answering. Fetching the results of a wait shares
  one deadline however many of them fail. Installs are bounded the same way (a
  replacement's install is a request awaited beside the gather's others, bounded
  by at least :data:`START_WAIT_S`); stop-time calls by :data:`STOP_WAIT_S`.
- Errors. A shard-side :class:`~flowrl.errors.OperatorError` (``RayTaskError``
  whose cause is one) is raised as itself, remote traceback text kept, chained
  from the Ray error; any other remote exception becomes an OperatorError naming
  the shard's source node. A dead or unreachable actor becomes a
  :class:`~flowrl.errors.WorkerError` naming the shard (``"from_range[1]"``).
- Stop. Stages on adopted hosts are uninstalled (waited for at most
  :data:`STOP_WAIT_S`; a shard found stuck is sent the call but neither waited
  for nor asked for its item counts, as its actor is busy in the call that
  hangs, so a run that fails on a stuck shard stops at once); aggregators are
  asked to stop their sub-runs (so the stages *they* installed on adopted hosts
  go too), then every actor this run created is killed and its death awaited,
  all bounded by :data:`STOP_WAIT_S`.

State: ``_methods`` (per shard, its host's ``flowrl_pull`` method), ``_next`` (per
shard whose run is its host's default, the host's ``flowrl_next``), ``_replied``
(per shard, when its last reply was collected), ``_unanswered`` (the shards
whose request went unanswered for ``remote_timeout_s``, until replaced) and
``_aggregators`` (ids of the aggregator handles this backend made, which need a
``flowrl_close`` before they are killed).
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Iterable, Sequence
from typing import Any

import ray
from ray.exceptions import (GetTimeoutError, ObjectLostError, RayActorError, RayError,
                            RayTaskError)
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from flowrl.errors import ConfigError, FlowError, OperatorError, WorkerError
from flowrl.runtime.shard_host import ItemsHost, StreamEnd
from flowrl.runtime.aggregator import AggregatorHost
from flowrl.runtime.backend import Backend, Request, Shard, host_lost
# One start-wait bound and one ensure_ray for every backend user (re-exported here).
from flowrl.runtime.calls import (INIT_DEFAULTS, START_WAIT_S, Calls,  # noqa: F401
                                  ensure_ray, lost_error)

#: Actor options of the hosts the runtime creates for item sources.
ITEM_HOST_OPTIONS = {"num_cpus": 0}
#: Upper bound on each wait ``stop()`` does (uninstalls, aggregator close, kills).
STOP_WAIT_S = 3.0

_remote_classes: dict[type, Any] = {}
_monotonic = time.monotonic


def remote_class(cls: type) -> Any:
    """``ray.remote(cls)``, made once per process (the class is exported once)."""
    rc = _remote_classes.get(cls)
    if rc is None:
        rc = _remote_classes[cls] = ray.remote(cls)
    return rc


class RayRequest(Request):
    """A request whose result is the object ``ref`` of a host call: a pull
    (``flowrl_next`` or ``flowrl_pull``), or a replacement's ``flowrl_install``.
    ``bare``: the reply is ``flowrl_next``'s, one item or :data:`STREAM_END`, which
    the result holds as a pull's ``(items, ended)``."""

    __slots__ = ("ref", "sent", "bare")

    def __init__(self, shard: Shard, n: int, ref: ray.ObjectRef, bare: bool = False):
        super().__init__(shard, n)
        self.ref = ref
        self.sent = _monotonic()
        self.bare = bare

    def set_result(self, value: Any) -> None:
        if self.bare:
            value = ([], True) if value.__class__ is StreamEnd else ([value], False)
        super().set_result(value)

    def release(self) -> None:
        self.ref = None


def _died(e: BaseException) -> str:
    """What a message says of an actor that died (``e``: Ray's error for it)."""
    first = str(e).strip().splitlines()[0] if str(e).strip() else ""
    return f"(a Ray actor) died or became unreachable: {type(e).__name__}: {first}"


def translate_error(shard: Shard, e: BaseException) -> BaseException:
    """The flowrl error for Ray error ``e`` raised by a call to ``shard``'s host.

    The returned error has ``e`` as its ``__cause__``.
    """
    if isinstance(e, (RayActorError, ObjectLostError)):
        err: BaseException = host_lost(WorkerError(
            f"shard host {shard.label} {_died(e)}; the run cannot continue without it (give "
            "from_actors(restart=...) or, for algorithms, keep recreate_failed_workers=True "
            "to replace it)"), f"died ({type(e).__name__})")
    elif isinstance(e, RayTaskError):
        cause = e.cause
        if isinstance(cause, FlowError):
            err = cause
        else:
            stage = shard.stage
            err = OperatorError(
                f"operator {stage.source_id!r} ({stage.source_label}) on shard "
                f"{shard.label} raised {type(cause).__name__}: {cause}",
                node_id=stage.source_id, label=stage.source_label,
                remote_traceback=getattr(e, "traceback_str", "") or str(e))
    elif isinstance(e, RayError):
        err = WorkerError(f"shard {shard.label}: Ray failed to deliver its result: "
                          f"{type(e).__name__}: {e}")
    else:
        return e
    err.__cause__ = e
    return err


def stuck_error(labels: list[str], timeout: float) -> WorkerError:
    """The WorkerError for shards that left a request unanswered for ``timeout`` s."""
    which = ", ".join(sorted(set(labels)))
    return host_lost(WorkerError(
        f"shard host {which} has not answered a request for {timeout:g} s "
        f"(remote_timeout_s={timeout:g}): it is stuck (an env hanging in step, a deadlock) "
        "or far too slow; find out why, or raise plan.compile(remote_timeout_s=...)"),
        f"silent for {timeout:g} s")


def _in_order(requests: list[RayRequest], ready) -> list[RayRequest]:
    """The ready requests not preceded by a pending one of the same shard
    (``requests``: each shard's in submission order)."""
    ready = ready if isinstance(ready, set) else set(ready)
    blocked: set[Shard] = set()
    out = []
    for r in requests:
        if r.ref in ready:
            if r.shard not in blocked:
                out.append(r)
        else:
            blocked.add(r.shard)
    return out


def _nodes_offering(options: dict, label: str) -> list[str]:
    """Ids of the alive nodes whose total resources cover ``options`` (an actor's
    ``num_cpus``/``resources``); a ConfigError naming ``label`` if none does."""
    wanted = {"CPU": options.get("num_cpus", 0), **options.get("resources", {})}
    nodes = sorted(n["NodeID"] for n in ray.nodes() if n["Alive"] and all(
        n["Resources"].get(name, 0) >= amount for name, amount in wanted.items()))
    if not nodes:
        raise ConfigError(
            f"host {label} asks for num_cpus/resources {options} (annotations on plan.graph), "
            "but no alive Ray node has that much in total; start Ray with those resources "
            "(ray.init(resources={...}) or `ray start --resources`), or lower the annotation")
    return nodes


class RayBackend(Backend):
    """Shard hosts as Ray actors; see the module docstring for the policy."""

    name = "ray"
    remote_waits = True

    def __init__(self, remote_timeout_s: float | None = None) -> None:
        ensure_ray()
        self.remote_timeout_s = remote_timeout_s
        self._replied: dict[Shard, float] = {}
        self._methods: dict[Shard, Any] = {}
        self._next: dict[Shard, Any] = {}
        self._unanswered: set[Shard] = set()
        self._nodes: list[str] | None = None  # alive node ids, read at the first item host
        self._item_hosts = 0
        self._aggregators: set[int] = set()

    # ------------------------------------------------------------------ hosts
    def make_item_host(self, source: Any, repeat: bool, options: dict | None = None,
                       label: str = "") -> Any:
        # Round-robin over the nodes alive when the run starts, with hard affinity:
        # Ray's "SPREAD" and soft affinity are both best effort and were seen to put
        # every zero-CPU host on one node. A host whose node dies dies with it and
        # surfaces as a WorkerError, like any other dead host. ``options`` (the
        # plan's num_cpus/resources annotations) narrow the round-robin to the nodes
        # that have that much in total, so a pinned host can always be scheduled.
        if self._nodes is None:
            self._nodes = sorted(n["NodeID"] for n in ray.nodes() if n["Alive"])
        nodes = self._nodes if not options else _nodes_offering(options, label)
        node = nodes[self._item_hosts % len(nodes)]
        self._item_hosts += 1
        return remote_class(ItemsHost).options(
            **{**ITEM_HOST_OPTIONS, **(options or {})},
            scheduling_strategy=NodeAffinitySchedulingStrategy(node_id=node, soft=False),
        ).remote(source, repeat)

    def make_aggregator_host(self, spec: Any, options: dict | None = None,
                             label: str = "") -> Any:
        # Beside the driver, unless ``options`` ask for what the driver's node does
        # not have: then round-robin over the nodes that have it.
        here = ray.get_runtime_context().get_node_id()
        node = here
        if options:
            nodes = _nodes_offering(options, label)
            node = here if here in nodes else nodes[len(self._aggregators) % len(nodes)]
        host = remote_class(AggregatorHost).options(
            **{"num_cpus": 0, **(options or {})},
            scheduling_strategy=NodeAffinitySchedulingStrategy(node_id=node, soft=False),
        ).remote(spec, "ray")
        self._aggregators.add(id(host))
        return host

    def install(self, shards: list[Shard], replacing: bool = False) -> None:
        """One ``flowrl_install`` call per shard, all awaited together.

        ``replacing``: the hosts are replacements just created, whose start-up may
        take longer than ``remote_timeout_s``; the wait is at least :data:`START_WAIT_S`.
        """
        calls = []
        for s in shards:
            try:
                method = s.host.flowrl_install
            except AttributeError:
                raise ConfigError(
                    f"from_actors: shard {s.label} is a Ray actor whose class does not "
                    "inherit flowrl.ShardHost; subclass it and implement shard_items()"
                ) from None
            calls.append((s, method.remote(s.key, s.stage)))
        timeout = self.remote_timeout_s
        if replacing and timeout is not None:
            timeout = max(timeout, START_WAIT_S)
        for s, default in zip(shards, self._fetch(calls, timeout)):
            self._installed(s, default)

    def _installed(self, shard: Shard, default: Any) -> None:
        """Note how to pull ``shard``: its run is its host's default, or a guest."""
        if default is True:
            self._next[shard] = shard.host.flowrl_next
        else:
            self._next.pop(shard, None)

    def begin_install(self, shard: Shard) -> Request:
        """One ``flowrl_install`` call, not awaited: a request among the gather's others
        whose bound is at least :data:`START_WAIT_S` (the replacement is starting)."""
        try:
            method = shard.host.flowrl_install
        except AttributeError:
            raise ConfigError(
                f"from_actors: shard {shard.label} is a Ray actor whose class does not "
                "inherit flowrl.ShardHost; subclass it and implement shard_items()"
            ) from None
        req = RayRequest(shard, 0, method.remote(shard.key, shard.stage))
        if self.remote_timeout_s is not None:
            req.sent += max(0.0, START_WAIT_S - self.remote_timeout_s)
        return req

    # ------------------------------------------------------------------ requests
    def end_install(self, request: Request) -> None:
        self._installed(request.shard, request.result())

    def submit(self, shard: Shard, n: int) -> Request:
        if n == 1:  # the gathers' usual request
            nxt = self._next.get(shard)
            if nxt is not None:
                return RayRequest(shard, 1, nxt.remote(), bare=True)
        method = self._methods.get(shard)
        if method is None:
            method = self._methods[shard] = shard.host.flowrl_pull
        return RayRequest(shard, n, method.remote(shard.key, n))

    def wait_all(self, requests: list[Request]) -> None:
        pending = [r for r in requests if not r.done]
        if not pending:
            return
        refs = [r.ref for r in pending]
        # Requests of a round were submitted just now: waiting and fetching is one
        # blocking ray.get (a non-blocking ray.wait first would almost never help).
        try:
            values = ray.get(refs, timeout=self._time_left(pending))
        except GetTimeoutError:
            # The stuck shards' requests fail (the driver restarts or raises); the rest
            # are collected.
            ready = set(ray.wait(refs, num_returns=len(refs), timeout=0)[0])
            self._fail_stuck(pending, [r for r in pending if r.ref not in ready])
            self._collect([r for r in pending if not r.done])
            return
        except Exception:  # noqa: BLE001 - some failed: let all finish, resolve one by one
            ray.wait(refs, num_returns=len(refs), timeout=self._time_left(pending))
            self._collect(pending)
            return
        now = _monotonic()
        replied = self._replied
        for r, v in zip(pending, values):
            r.set_result(v)
            replied[r.shard] = now

    def poll_any(self, queues: list[Sequence[Request]]) -> bool:
        """A non-blocking sweep of every pending request (see :meth:`wait_any`)."""
        self._sweep([r for q in queues for r in q if not r.done])
        self._fail_overdue(queues)
        return any(q[0].done for q in queues)

    def wait_any(self, queues: list[Sequence[Request]], polled: bool = False) -> None:
        """Return once some shard's oldest pending request is done, with every ready
        one marked done.

        A non-blocking sweep first (:meth:`poll_any`, skipped when ``polled``: the
        caller's own just found nothing ready); only if it leaves no shard's
        oldest request done, one bounded blocking wait for one of them, which is
        collected (the shards that answered meanwhile are seen by the next call's
        sweep). Replies can be processed out of order, so a request is only marked
        done once every earlier request to its shard is (requests to a shard
        complete in submission order). A shard whose oldest request has waited
        ``remote_timeout_s`` has all its pending requests failed (lost host).
        """
        if not polled and self.poll_any(queues):
            return
        heads = [q[0] for q in queues]
        while True:
            left = self._time_left(heads)
            if left == 0.0:  # a head has waited remote_timeout_s: its shard is stuck
                break
            first, _ = ray.wait([r.ref for r in heads], num_returns=1, timeout=left)
            if first:
                # A head has no pending request before it: collect it as it is (a
                # second sweep here cost one more ray.wait per blocking pass; what
                # else became ready meanwhile is swept on the next pass)
                self._collect([r for r in heads if r.ref in first])
                break
        self._fail_overdue(queues)

    def _fail_overdue(self, queues: list[Sequence[Request]]) -> None:
        """Fail every pending request of the shards whose oldest request (not done) has
        waited ``remote_timeout_s``."""
        if self.remote_timeout_s is None:
            return
        stuck = self._stuck([q[0] for q in queues if not q[0].done])
        if stuck:
            self._fail_stuck([r for q in queues for r in q if not r.done], stuck)

    def _sweep(self, requests: list[RayRequest]) -> None:
        """Collect, without blocking, every one of ``requests`` (each shard's in
        submission order) that is ready and not preceded by a pending one."""
        if not requests:
            return
        refs = [r.ref for r in requests]
        ready, _ = ray.wait(refs, num_returns=len(refs), timeout=0)
        if ready:
            self._collect(_in_order(requests, ready))

    def _time_left(self, heads: list[RayRequest]) -> float | None:
        """Seconds until the first of ``heads`` (oldest per shard) exceeds the bound
        (0.0 once one has: :meth:`_stuck` names it)."""
        limit = self.remote_timeout_s
        if limit is None:
            return None
        replied, oldest = self._replied, math.inf
        for r in heads:  # min over heads of max(sent, last reply), no call per head
            since, last = r.sent, replied.get(r.shard, 0.0)
            if last > since:
                since = last
            if since < oldest:
                oldest = since
        left = oldest + limit - _monotonic()
        return left if left > 0.0 else 0.0

    def _stuck(self, requests: list[RayRequest]) -> list[RayRequest]:
        """The requests among ``requests`` that have waited ``remote_timeout_s`` or more
        (their shard's oldest among them, and later ones sent as long ago)."""
        limit = self.remote_timeout_s
        if limit is None:
            return []
        # Waiting since = max(sent, the shard's last reply): both must be that old.
        # Requests are recent on a run that moves, so the first test settles it.
        threshold = _monotonic() - limit
        replied = self._replied
        return [r for r in requests
                if r.sent <= threshold and replied.get(r.shard, 0.0) <= threshold]

    def _fail_stuck(self, requests: Iterable[RayRequest], stuck: list[RayRequest]) -> None:
        """Fail every pending request of the shards of ``stuck`` with a lost-host error."""
        shards = {r.shard for r in stuck}
        self._unanswered |= shards
        for r in requests:
            if r.shard in shards and not r.done:
                r.set_error(stuck_error([r.shard.label], self.remote_timeout_s))
                r.release()  # a failed request is not served: nothing releases it later

    def _collect(self, requests: list[RayRequest]) -> None:
        """Fetch the (ready) results of ``requests`` with one ``ray.get``.

        Bounded by ``remote_timeout_s`` as a whole: where the joint fetch fails,
        each result is fetched alone within what is left of that one deadline.
        """
        if not requests:
            return
        now = _monotonic()
        replied = self._replied
        for r in requests:
            replied[r.shard] = now
        limit = self.remote_timeout_s
        deadline = None if limit is None else now + limit
        try:
            values = ray.get([r.ref for r in requests], timeout=limit)
        except Exception:  # noqa: BLE001 - some failed: resolve one by one
            for r in requests:
                left = None if deadline is None else max(0.0, deadline - _monotonic())
                try:
                    r.set_result(ray.get(r.ref, timeout=left))
                except Exception as e:  # noqa: BLE001 - surfaced by result()
                    r.set_error(stuck_error([r.shard.label], limit)
                                if isinstance(e, GetTimeoutError) else translate_error(r.shard, e))
                    r.release()  # as in _fail_stuck; a result's reference waits for the driver
            return
        for r, v in zip(requests, values):
            r.set_result(v)

    def _fetch(self, calls: list[tuple[Shard, Any]], timeout: float | None) -> list[Any]:
        """``ray.get`` every ref of ``calls`` (bounded); raise the first failure, translated."""
        refs = [ref for _, ref in calls]
        try:
            return ray.get(refs, timeout=timeout)
        except GetTimeoutError:
            ready = set(ray.wait(refs, num_returns=len(refs), timeout=0)[0])
            raise stuck_error([s.label for s, ref in calls if ref not in ready],
                              timeout) from None
        except Exception:  # noqa: BLE001 - find and translate the failing call
            pass
        out = []
        for shard, ref in calls:
            try:
                out.append(ray.get(ref, timeout=timeout))
            except GetTimeoutError:
                raise stuck_error([shard.label], timeout) from None
            except Exception as e:  # noqa: BLE001
                raise translate_error(shard, e) from e
        return out

    def forget(self, shard: Shard) -> None:
        self._methods.pop(shard, None)
        self._next.pop(shard, None)
        self._replied.pop(shard, None)
        self._unanswered.discard(shard)

    def end_host(self, host: Any) -> None:
        _kill(host)

    # ------------------------------------------------------------------ stop
    def release(self, shards: list[Shard]) -> None:
        """Uninstall this run's stages from hosts that outlive it (bounded wait)."""
        refs = []
        for s in shards:
            self._methods.pop(s, None)
            try:
                ref = s.host.flowrl_uninstall.remote(s.key)
            except Exception:  # noqa: BLE001 - not a ShardHost / gone: nothing installed
                continue
            if s not in self._unanswered:  # a stuck host runs it only if it ever returns
                refs.append(ref)
        _settle(refs)

    def item_counts(self, shards: list[Shard]) -> list[dict[str, int]]:
        """Per shard, its nodes' item counts; ``{}`` for a host that is gone, stuck or slow."""
        calls = []
        for s in shards:
            try:
                calls.append(None if s in self._unanswered
                             else s.host.flowrl_item_counts.remote(s.key))
            except Exception:  # noqa: BLE001 - not a ShardHost: no counts
                calls.append(None)
        refs = [r for r in calls if r is not None]
        ready = set(ray.wait(refs, num_returns=len(refs), timeout=STOP_WAIT_S)[0]) if refs else set()
        out = []
        for ref in calls:
            try:
                out.append(ray.get(ref) if ref in ready else {})
            except Exception:  # noqa: BLE001 - a dead host reports nothing
                out.append({})
        return out

    def destroy(self, hosts: list[Any]) -> None:
        """Kill the actors this run created; aggregators first stop their sub-runs."""
        aggregators = [h for h in hosts if id(h) in self._aggregators]
        others = [h for h in hosts if id(h) not in self._aggregators]
        # Item hosts go first, so an aggregator blocked pulling from them returns
        # (with an error) and can run flowrl_close, which uninstalls the stages its
        # sub-run put on adopted hosts.
        for h in others:
            _kill(h)
        _settle([a.flowrl_close.remote() for a in aggregators])
        for h in aggregators:
            _kill(h)
            self._aggregators.discard(id(h))
        # Await the deaths so that "stop() returned" means "the actors are gone".
        _settle([h.flowrl_ping.remote() for h in hosts])

    def stop(self) -> None:
        self._methods.clear()
        self._replied.clear()


def _kill(handle: Any) -> None:
    try:
        ray.kill(handle, no_restart=True)
    except Exception:  # noqa: BLE001 - already dead
        pass


def _settle(refs: list) -> None:
    """Wait (at most STOP_WAIT_S) for ``refs`` to finish either way; ignore failures."""
    if refs:
        ray.wait(refs, num_returns=len(refs), timeout=STOP_WAIT_S)


# ---------------------------------------------------------------------- actor calls
# The Ray side of flowrl.runtime.calls: how the WorkerSet, replay actors, metrics
# collection and weight sends reach Ray actors. A pending call is its ObjectRef.

class RayCalls(Calls):
    """:class:`~flowrl.runtime.calls.Calls` on Ray actors: a call is one
    ``.remote()``, a wait one bounded ``ray.wait``; see :mod:`flowrl.runtime.calls`
    for the errors."""

    name = "ray"
    remote = True

    def create(self, cls: type, *args: Any, num_cpus: float = 1.0,
               on_driver_node: bool = False, python_path: Sequence[str] = (),
               **kwargs: Any) -> Any:
        options: dict[str, Any] = {"num_cpus": num_cpus}
        if on_driver_node:
            options["scheduling_strategy"] = NodeAffinitySchedulingStrategy(
                node_id=ray.get_runtime_context().get_node_id(), soft=False)
        if python_path:  # the actor's process starts with them ahead of PYTHONPATH
            inherited = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
            options["runtime_env"] = {"env_vars": {
                "PYTHONPATH": os.pathsep.join([*python_path, *inherited])}}
        return remote_class(cls).options(**options).remote(*args, **kwargs)

    def call(self, handle: Any, method: str, *args: Any) -> ray.ObjectRef:
        return getattr(handle, method).remote(*args)

    def wait(self, pending: Sequence[Any], timeout: float | None) -> list:
        if not pending:
            return []
        ready, _ = ray.wait(list(pending), num_returns=len(pending), timeout=timeout)
        done = set(ready)
        return [p for p in pending if p in done]

    async def wait_async(self, pending: Sequence[Any], timeout: float | None) -> list:
        import asyncio
        import functools
        if not pending or timeout == 0:
            return self.wait(pending, 0)
        # The loop's default executor, not a run's I/O thread (its gathers' waits own it).
        return await asyncio.get_running_loop().run_in_executor(
            None, functools.partial(self.wait, pending, timeout))

    def get(self, pending: Any, *, timeout: float | None, label: str, setting: str) -> Any:
        try:
            return ray.get(pending, timeout=timeout)
        except GetTimeoutError:
            raise lost_error(label, f"not answered within {timeout:g} s ({setting})",
                             f"(a Ray actor) has not answered within {timeout:g} s "
                             f"({setting}): it is stuck or far too slow") from None
        except (RayActorError, ObjectLostError) as e:
            raise lost_error(label, f"died ({type(e).__name__})", _died(e)) from e

    def put(self, obj: Any) -> Any:
        return ray.put(obj)

    def kill(self, handle: Any) -> None:
        _kill(handle)


#: The Ray :class:`~flowrl.runtime.calls.Calls`.
RAY_CALLS = RayCalls()
