"""The driver runtime: one async iterator per plan node, over any backend.

Policy: pull-based. The run's output iterator pulls from its inputs, gathers
submit requests to shards through the backend and await them, and the backend
alone decides how a request executes. The driver executes a
:class:`~flowrl.runtime.compile.Compiled` program and nothing else: it finds a
node's inputs by id in ``program.ops``. Every run of synchronous operators is
one :class:`~flowrl.runtime.stages.FusedStage` (the code shards run): the stage
pulls a synchronous ``from_iterable`` itself, or the driver pushes an async
input's items into it. Every other operator maps to its builder through
:data:`BUILDERS`, one async generator per node. A gather's logic is a plain
generator of steps (:class:`Wait`, then each fetch): the loop awaits its waits,
and a plan that is nothing but the gather does them in the caller's thread with
no loop at all.

State: ``hosts`` (per host-source id: the hosts and whether this run created
them), ``shards`` (per gather id: the :class:`Shard` list it reads), ``stats``
(per node id: :class:`NodeStats`), ``stages`` (the driver-side runs with their
stage and busy time, resolved into per-node figures by :meth:`Driver.node_stats`),
``splitters`` (per ``duplicate``), ``recoveries`` (per ``from_actors`` source with a
``restart``: the :class:`~flowrl.runtime.recovery.ShardRecovery` that replaces its
lost hosts; the policy and its counts live there) and ``relay`` (the
:class:`~flowrl.runtime.recovery.RecoveryRelay` of aggregators on Ray, if any).
"""

from __future__ import annotations

import logging
import random
import time
from collections import deque
from collections.abc import Sequence
from typing import Any, AsyncIterator, Iterator

from flowrl.errors import ConfigError, WorkerError
from flowrl.metrics import MetricsContext
from flowrl.runtime.backend import Backend, Request, Shard, lost_reason
from flowrl.runtime.compile import Compiled, Op, StageSpec, is_sync_source
from flowrl.runtime.concurrency import Splitter, async_union, round_robin
from flowrl.runtime.context import RunContext, call_blocking
from flowrl.runtime.recovery import HostList, Recovery, RecoveryRelay, ShardRecovery
from flowrl.runtime.stages import FusedStage, operator_error
from flowrl.runtime.stats import NodeStats

perf = time.perf_counter
log = logging.getLogger("flowrl.runtime")

#: ``(host, stage, label, index, recovery)`` of one shard a program's entry gather reads
#: (``recovery``: see :class:`~flowrl.runtime.backend.Shard`).
Member = tuple[Any, FusedStage, str, int, Any]


class Driver:
    """Creates a run's hosts and shards, and builds its node iterators.

    ``inputs``: for a program with an ``entry`` gather (an aggregator's pipeline),
    the shards that gather reads.
    """

    def __init__(self, program: Compiled, backend: Backend, ctx: RunContext,
                 metrics: MetricsContext, key: str, seed: int = 0,
                 inputs: list[Member] = ()):
        self.program = program
        self.ops = program.ops
        self.backend = backend
        self.ctx = ctx
        self.metrics = metrics
        self.key = key
        self.seed = seed
        self.inputs = list(inputs)
        self.stats = {v: NodeStats() for v in self.ops}
        self.hosts: dict[str, list[tuple[Any, bool]]] = {}
        self.shards: dict[str, list[Shard]] = {}
        self.splitters: dict[str, Splitter] = {}
        self.stages: list[tuple[StageSpec, FusedStage, _Busy]] = []
        self.agens: list[Any] = []
        self.recoveries: dict[str, ShardRecovery] = {}  # per from_actors source with restart
        self.relay: RecoveryRelay | None = None  # made when an aggregator's member needs it

    # ------------------------------------------------------------------ setup
    def start(self) -> None:
        """Create the hosts this run owns and install every fused stage."""
        for src in self.program.host_sources:
            self.hosts[src] = self._make_hosts(self.ops[src])
        for gather, slots in self.program.slots.items():
            if self.ops[gather].placement == "aggregators":
                continue  # consumed inside the aggregators, not by this driver
            self.shards[gather] = [
                Shard(self.hosts[s.source][s.index][0], f"{self.key}/{gather}",
                      f"{s.source}[{s.index}]", FusedStage.from_spec(s.stage),
                      recovery=self._recovery(self.ops[s.source]), index=s.index)
                for s in slots]
        entry = self.program.entry
        if entry is not None:
            self.shards[entry] = [Shard(host, f"{self.key}/{entry}", label, stage,
                                        recovery=recovery, index=index)
                                  for host, stage, label, index, recovery in self.inputs]
        self.backend.install([s for shards in self.shards.values() for s in shards])

    def _make_hosts(self, src: Op) -> list[tuple[Any, bool]]:
        if src.op == "from_actors":
            return [(h, False) for h in src.params["hosts"]]
        # actor options from the graph's num_cpus/resources annotations (compile.py)
        options = self.program.host_options.get(src.id, {})
        if src.op == "aggregate":
            from flowrl.runtime.aggregator import AggregatorSpec
            hosts = []
            for j, group in enumerate(self.program.groups[src.id]):
                members = [(self.hosts[s.source][s.index][0], FusedStage.from_spec(s.stage),
                            f"{s.source}[{s.index}]", s.index,
                            self._shipped(self.ops[s.source]))
                           for s in group]
                spec = AggregatorSpec(self.program.pipelines[src.id], members, self.seed + j,
                                      self.backend.remote_timeout_s)
                hosts.append((self.backend.make_aggregator_host(
                    spec, options, label=f"{src.id}[{j}]"), True))
            return hosts
        return [(self.backend.make_item_host(part, src.params["repeat"], options,
                                             label=f"{src.id}[{i}]"), True)
                for i, part in enumerate(src.params["shards"])]

    def stop(self) -> None:
        """Release this run's stages from surviving hosts and end the hosts it made."""
        created = {id(h): h for hosts in self.hosts.values() for h, mine in hosts if mine}
        outliving = [s for shards in self.shards.values() for s in shards
                     if id(s.host) not in created]
        try:
            self.backend.release(outliving)
        finally:
            try:
                self.backend.destroy(list(created.values()))
            finally:
                if self.relay is not None:
                    self.relay.close()

    # ------------------------------------------------------------------ recovery
    def recover(self, shard: Shard, error: BaseException, lost: int) -> Request | None:
        """Replace ``shard``'s lost host, or drop the shard; re-raise what is not
        recoverable.

        ``error`` is what a request to the shard raised; ``lost`` is how many of the
        shard's requests (in flight or failed) are abandoned. Only a lost host (died,
        unreachable, silent past the bound) of a shard with a recovery is recovered:
        the host is ended and its source's recovery decides, counts and logs
        (:mod:`flowrl.runtime.recovery`). Returns the request that installs the
        shard's stage afresh on the replacement (the gather waits for it beside its
        other requests, then calls :meth:`installed`), or None if the shard was
        dropped.
        """
        if lost_reason(error) is None or shard.recovery is None:
            raise error
        return self._replace(shard, lost_reason(error), lost)

    def _replace(self, shard: Shard, reason: str, lost: int) -> Request | None:
        self.backend.forget(shard)
        self.backend.end_host(shard.host)
        new = shard.recovery.replace(shard.index, shard.host, reason, lost)
        if new is None:
            return None
        shard.host = new
        return self.backend.begin_install(shard)

    def installed(self, request: Request) -> "Request | bool":
        """Finish a replacement's install (``request`` from :meth:`recover`, done).

        Returns True once the shard has a working host again. A replacement lost
        while it started is recovered in turn: the next install request is
        returned, or False if the shard was dropped instead. Nothing here waits,
        so a gather keeps serving its other shards however often that repeats
        (``max_restarts`` still bounds it).
        """
        try:
            self.backend.end_install(request)
        except WorkerError as e:
            reason = lost_reason(e)
            if reason is None:
                raise
            shard = request.shard
            log.warning("the replacement of shard host %s was lost while it started "
                        "(%s): %s", shard.label, reason, str(e).splitlines()[0][:200])
            nxt = self._replace(shard, reason, 0)
            return False if nxt is None else nxt
        return True

    def _recovery(self, source: Op) -> ShardRecovery | None:
        """The recovery of ``source``'s shards (None: a loss is a WorkerError), one per
        source and run, counting in this run's metrics.

        A WorkerSet's restarter is its own recovery's; a ``restart`` function gets one
        that replaces each shard at most ``max_restarts`` times.
        """
        if source.op != "from_actors" or source.params["restart"] is None:
            return None
        if source.id not in self.recoveries:
            p = source.params
            if isinstance(p["restart"], ShardRecovery):
                if p["max_restarts"] is not None:
                    raise ConfigError(
                        f"from_actors {source.id!r}: max_restarts={p['max_restarts']} with a "
                        "WorkerSet's restarter; the WorkerSet's max_worker_restarts caps its "
                        "replacements: drop max_restarts")
                shards = p["restart"]
            else:
                hosts = HostList(p["hosts"], p["restart"], source.id)
                shards = ShardRecovery(Recovery(hosts, max_restarts=p["max_restarts"],
                                                per_host=True), range(len(p["hosts"])))
            shards.recovery.count_in(self.metrics)
            self.recoveries[source.id] = shards
        return self.recoveries[source.id]

    def _shipped(self, source: Op) -> Any:
        """The recovery of ``source``'s shards inside an aggregator: on Ray, a stand-in
        that runs :meth:`_recovery`'s on the driver (:class:`RecoveryRelay`).
        In-process aggregators (local backend) hold no host that can be lost: None."""
        recovery = self._recovery(source)
        if recovery is None or self.backend.name != "ray":
            return None
        if self.relay is None:
            from flowrl.runtime.ray_backend import START_WAIT_S
            self.relay = RecoveryRelay(max(START_WAIT_S, self.backend.remote_timeout_s or 0.0))
        return self.relay.proxy(source.id, recovery)

    # ------------------------------------------------------------------ stats
    def node_stats(self) -> dict[str, dict]:
        for spec, stage, busy in self.stages:
            counts = stage.item_counts()
            pulled = self.program.pulls_source(spec)
            ids = ([spec.source_id] if pulled else []) + [s.node_id for s in spec.steps]
            prev = spec.source_id
            for node_id in ids:
                st = self.stats[node_id]
                st.items_out = counts.get(node_id, 0)
                st.items_in = counts.get(prev, 0) if node_id != spec.source_id else 0
                st.busy_s = busy.s
                st.fused_with = tuple(ids) if len(ids) > 1 else ()
                prev = node_id
        measured = {v for v, op in self.ops.items() if op.placement == "driver"}
        shard_out: dict[str, int] = {}
        for shards in self.shards.values():
            for counts in self.backend.item_counts(shards):
                for node_id, n in counts.items():
                    shard_out[node_id] = shard_out.get(node_id, 0) + n
        for node_id, op in self.ops.items():
            if node_id in shard_out:
                measured.add(node_id)
                st = self.stats[node_id]
                st.items_out = shard_out[node_id]
                st.items_in = sum(shard_out[p] for p, _ in op.inputs if p in shard_out)
        out = {node_id: st.as_dict() for node_id, st in sorted(self.stats.items())
               if node_id in measured}
        for node_id, op in self.ops.items():  # an operator may add figures of its own
            report = getattr(op.params.get("fn"), "node_stats", None)
            if callable(report) and node_id in out:
                extra = report()
                if extra:
                    out[node_id]["extra"] = dict(extra)
        return out

    # ------------------------------------------------------------------ build
    def build(self, node_id: str, port: int = 0) -> AsyncIterator[Any]:
        """The async iterator of output ``port`` of node ``node_id``."""
        run = self.program.runs.get(node_id)
        if run is not None:
            agen = self._run(run)
        else:
            op = self.ops[node_id]
            builder = BUILDERS.get(op.op)
            if builder is None:
                raise ConfigError(f"{node_id!r}: operator {op.op!r} cannot run on the driver")
            agen = builder(self, op, port, self.stats[node_id])
        self.agens.append(agen)
        return agen

    def _input(self, op: Op, i: int = 0) -> AsyncIterator[Any]:
        return self.build(*op.inputs[i])

    def _fail(self, op: Op, e: Exception):
        return operator_error(op.id, op.label, e)

    # sources ----------------------------------------------------------------
    async def _from_iterable(self, op: Op, port: int, st: NodeStats):
        """An asynchronous source (a synchronous one is a run: :meth:`_run`)."""
        it = self._open_source(op).__aiter__()
        while True:
            try:
                x = await it.__anext__()
            except StopAsyncIteration:
                return
            except Exception as e:
                raise self._fail(op, e)
            st.items_out += 1
            yield x

    def _open_source(self, op: Op) -> Any:
        """Call a from_iterable factory: an async iterable, or an iterator."""
        try:
            source = op.params["factory"]()
            if hasattr(source, "__aiter__"):
                if is_sync_source(op):
                    raise TypeError("the factory returned an async iterable; make the "
                                    "factory an async generator function (async def ... yield)")
                return source
            return iter(source)
        except Exception as e:
            raise self._fail(op, e)

    # runs of synchronous operators ------------------------------------------
    def _stage(self, spec: StageSpec) -> tuple[FusedStage, "_Busy"]:
        stage, busy = FusedStage.from_spec(spec), _Busy()
        metrics = self.metrics
        stage.open(context=lambda: metrics.current_actor)
        self.stages.append((spec, stage, busy))
        return stage, busy

    def _run(self, spec: StageSpec) -> AsyncIterator[Any]:
        """A run of synchronous operators: one FusedStage that pulls its synchronous
        source, or into which the driver pushes the items of its async input."""
        stage, busy = self._stage(spec)
        if self.program.pulls_source(spec):
            return self._pulled(spec, stage, busy)
        return self._pushed(stage, busy, self._input(self.ops[spec.steps[0].node_id]))

    def pull_source(self, spec: StageSpec, stage: FusedStage) -> Iterator[Any]:
        """Open ``spec``'s synchronous source and pull it through ``stage``."""
        return stage(self._open_source(self.ops[spec.source_id]))

    async def _pulled(self, spec: StageSpec, stage: FusedStage, busy: "_Busy"):
        for x in _timed(self.pull_source(spec, stage), busy):
            yield x

    @staticmethod
    async def _pushed(stage: FusedStage, busy: "_Busy", upstream: AsyncIterator[Any]):
        push = stage.push
        async for x in upstream:
            t = perf()
            out = push(x)
            busy.s += perf() - t
            if out.__class__ is tuple:  # one-to-one steps only: computed already
                for y in out:
                    yield y
            else:  # lazy: each item is computed as it is taken
                for y in _timed(out, busy):
                    yield y
        for y in _timed(stage.finish(), busy):
            yield y

    def sync_output(self) -> "SyncOutput | None":
        """The plan output as a plain iterator, when the whole plan is one run that
        pulls a synchronous source.

        Such a plan needs no event loop at all: :class:`~flowrl.runtime.run.Run`
        then calls ``next()`` on the stage's output directly (see
        :class:`SyncOutput`). None for any other plan.
        """
        node_id, port = self.program.output
        spec = self.program.runs.get(node_id)
        if port or spec is None or not self.program.pulls_source(spec):
            return None
        return SyncOutput(self, spec)

    # other driver-side operators ----------------------------------------------
    async def _for_each_async(self, op: Op, port: int, st: NodeStats):
        fn = op.params["fn"]
        async for x in self._input(op):
            st.items_in += 1
            try:
                y = await fn(x)
            except Exception as e:
                raise self._fail(op, e)
            st.items_out += 1
            yield y

    # gathers -------------------------------------------------------------------
    # A gather's logic is a plain generator of *steps* (see :class:`Wait`): it
    # yields what it waits for and each fetch it made. The event loop runs it
    # through :meth:`_awaited`; a plan whose output is the gather itself runs it
    # through :meth:`_blocking`, with no loop at all.
    def _gather(self, op: Op, port: int, st: NodeStats):
        """``gather_sync``/``gather_async``: the items of its fetches."""
        return self._items(self._awaited(self._fetch_steps(op)))

    def _fetch_steps(self, op: Op) -> Iterator[Any]:
        """A gather's steps: ``gather_sync``'s rounds, ``gather_async``'s passes."""
        st = self.stats[op.id]
        if op.op == "gather_sync":
            return self._round_steps(op.id, st)
        return self._pass_steps(op.id, st, op.params["num_async"])

    async def _awaited(self, steps: Iterator[Any]):
        """The fetches of gather ``steps`` on the run's loop. An in-process backend's
        waits run the hosts right here (:meth:`_blocking`); a remote wait goes
        through ``call_blocking`` (on the I/O thread while other tasks share the
        loop), a pass's only once its sweep found nothing ready."""
        backend = self.backend
        try:
            if not backend.remote_waits:
                for fetch in self._blocking(steps):
                    yield fetch
                return
            for step in steps:
                if step.__class__ is not Wait:
                    yield step
                elif step.queues is None:
                    await call_blocking(backend.wait_all, step.requests)
                elif not backend.poll_any(step.queues):  # nothing ready yet: block, off the loop
                    await call_blocking(backend.wait_any, step.queues, True)
        finally:
            steps.close()

    def _blocking(self, steps: Iterator[Any]) -> Iterator[list[Request]]:
        """The fetches of gather ``steps``, each wait done in the caller's thread (no
        event loop: only for a gather that is the plan's whole driver side)."""
        backend = self.backend
        try:
            for step in steps:
                if step.__class__ is not Wait:
                    yield step
                elif step.queues is None:
                    backend.wait_all(step.requests)
                else:
                    backend.wait_any(step.queues)
        finally:
            steps.close()

    async def _items(self, fetches: AsyncIterator[list[Request]]):
        """The items of ``fetches`` (each a round's or a pass's done requests), one by
        one, each with ``metrics.current_actor`` set to its shard's actor."""
        metrics = self.metrics
        async for done in fetches:
            for actor, x in fetched_items(done):
                metrics.current_actor = actor
                yield x

    def output_fetches(self) -> Iterator[list[Request]] | None:
        """The output gather's fetches (its rounds, or its passes), when the plan's
        output is a ``gather_sync`` or ``gather_async`` read as it is; else None.

        Nothing else of the plan runs then, so the gather needs no event loop: its
        waits block the caller's thread (:meth:`_blocking`), and
        :class:`~flowrl.runtime.run.Run` hands out a fetch's items itself. The
        requests are sent exactly as when items are taken one by one: a gather
        submits its next round, or resubmits what a pass served, only when the
        iterator is resumed, and a pass resubmits before it yields."""
        node_id, port = self.program.output
        op = self.ops[node_id]
        if (port or node_id in self.program.runs or op.placement != "driver"
                or BUILDERS.get(op.op) is not Driver._gather):
            return None
        fetches = self._blocking(self._fetch_steps(op))
        self.agens.append(fetches)
        return fetches

    async def _batch_across_shards(self, op: Op, port: int, st: NodeStats):
        async for done in self._awaited(self._round_steps(op.id, st)):
            st.items_out += 1 - sum(len(r.result()[0]) for r in done)
            yield [x for r in done for x in r.result()[0]]

    def _round_steps(self, gather: str, st: NodeStats):
        """Rounds of one request per live shard; yields a :class:`Wait` for each
        round, then the round's done requests.

        The barrier waits for the replacements of lost hosts: a replacement's
        install is waited for beside the round's other requests, then it is asked
        for the round's item."""
        live = list(self.shards[gather])
        submit = self.backend.submit
        previous: list[Request] = []
        while live:
            requests = [submit(s, 1) for s in live]
            for req in previous:  # while the hosts work on this round (Request.release)
                req.release()
            st.depth(len(requests))
            t = perf()
            yield Wait(requests)
            for req in requests:
                if req.error is not None:  # a lost host (or a raising one): the slow path
                    requests = yield from self._settle_round(requests)
                    break
            st.wait_s += perf() - t
            st.depth(0)
            live, produced = [], 0
            for req in requests:
                items, ended = req.result()
                produced += len(items)
                if not ended:
                    live.append(req.shard)
            previous = requests
            if produced:
                st.items_in += produced
                st.items_out += produced
                yield requests

    def _settle_round(self, requests: list[Request]):
        """A waited round with failed requests, finished: each lost host's replacement
        is installed (waited for beside the others) and asked for the round's item; a
        shard that cannot be replaced drops out. Other errors are raised by
        :meth:`recover` (or later by ``result()``). Steps of :meth:`_round_steps`;
        returns the round's requests."""
        slots: list[Request | None] = list(requests)
        installs: dict[int, Request] = {}  # position -> install of its replacement
        while True:
            pending = []
            for k, req in enumerate(slots):
                if k in installs:
                    nxt = self.installed(installs.pop(k))
                    if nxt is True:
                        slots[k] = self.backend.submit(req.shard, 1)
                        pending.append(slots[k])
                    elif nxt is False:
                        slots[k] = None
                    else:
                        installs[k] = nxt
                        pending.append(nxt)
                elif req is not None and req.done and req.error is not None:
                    nxt = self.recover(req.shard, req.error, 1)
                    if nxt is None:
                        slots[k] = None
                    else:
                        installs[k] = nxt
                        pending.append(nxt)
            if not pending:
                return [r for r in slots if r is not None]
            yield Wait(pending)

    def _aggregator_input(self, op: Op, port: int, st: NodeStats):
        return self._items(self._awaited(self._pass_steps(op.id, st, 1)))

    def _pass_steps(self, gather: str, st: NodeStats, num_async: int):
        """Requests as they complete, ``num_async`` in flight per shard, served least
        recently served shard first; yields a :class:`Wait` for each pass, then the
        pass's served requests.

        Each pass waits until some shard has answered (the backend's ``wait_any``
        marks every answered request done), then serves one done request per shard,
        the shards in the order they were last served (never-served first, in shard
        order), and resubmits to each; the next pass starts when the generator is
        resumed (its items taken). So under a consumer slower than the shards every
        shard is served once per pass (a rotation), and no shard waits behind
        another however fast that one answers.

        A lost host's replacement starts while the other shards keep being served:
        its install is one more request waited for, and its pulls begin once it is done.
        A failure while serving (an error a shard raised, a loss that cannot be
        recovered) is raised once the requests served before it in that pass are out.
        """
        backend = self.backend
        inflight: dict[int, deque[Request]] = {}
        starting: dict[int, Request] = {}   # shard id -> install of its replacement
        for s in self.shards[gather]:
            inflight[id(s)] = deque(backend.submit(s, 1) for _ in range(num_async))
        served = dict.fromkeys(inflight)    # shard ids, least recently served first
        submit = backend.submit
        while inflight or starting:
            queues: list = list(inflight.values())
            if starting:
                queues += [(r,) for r in starting.values()]
            st.depth(sum(map(len, queues)))
            t = perf()
            yield Wait(queues=queues)  # done at once when one is done already
            st.wait_s += perf() - t
            if starting:
                for sid, req in list(starting.items()):
                    if req.done:
                        del starting[sid]
                        nxt = self.installed(req)
                        if nxt is True:
                            inflight[sid] = deque(submit(req.shard, 1)
                                                  for _ in range(num_async))
                        elif nxt is False:
                            del served[sid]
                        else:
                            starting[sid] = nxt
            ready = [sid for sid in served if sid in inflight and inflight[sid][0].done]
            done: list[Request] = []
            failure = None
            try:
                for sid in ready:
                    queue = inflight[sid]
                    req = queue.popleft()
                    del served[sid]
                    served[sid] = None  # now the most recently served
                    try:
                        _, ended = req.result()
                    except WorkerError as e:
                        del inflight[sid]
                        nxt = self.recover(req.shard, e, 1 + len(queue))
                        if nxt is None:
                            del served[sid]
                        else:
                            starting[sid] = nxt
                        continue
                    if ended:
                        del inflight[sid], served[sid]
                    else:
                        queue.append(submit(req.shard, 1))
                    done.append(req)
            except Exception as e:  # what the pass served before the failure comes first
                failure = e
            for req in done:  # now that their shards are busy again (Request.release)
                req.release()
            produced = sum(len(r.result()[0]) for r in done)
            if produced:
                st.items_in += produced
                st.items_out += produced
                yield done
            if failure is not None:
                raise failure

    # fan-in and fan-out -------------------------------------------------------
    def _concurrently(self, op: Op, port: int, st: NodeStats):
        inputs = [self.build(p, port) for p, port in op.inputs]
        p = op.params
        emit = (set(range(len(inputs))) if p["output_indexes"] is None
                else set(p["output_indexes"]))
        if p["mode"] == "async":
            return async_union(self.ctx, inputs, emit, st)
        weights = p["weights"] or [1] * len(inputs)
        rng = random.Random(p["seed"] if p["seed"] is not None else self.seed)
        return round_robin(self.ctx, inputs, weights, emit, rng, st)

    def _duplicate(self, op: Op, port: int, st: NodeStats):
        splitter = self.splitters.get(op.id)
        if splitter is None:
            splitter = self.splitters[op.id] = Splitter(
                self.ctx, self._input(op), op.num_outputs, op.params["max_lag"], st)
        return splitter.branch(port)


#: Operator name -> the Driver method that builds its iterator. The synchronous
#: operators (``compile.SYNC_OPS``: for_each, filter, zip_with_source_actor, batch,
#: flatten, combine, shuffle) are not here: they always run in a FusedStage
#: (:meth:`Driver._run`).
BUILDERS = {
    "from_iterable": Driver._from_iterable,
    "for_each_async": Driver._for_each_async,
    "gather_sync": Driver._gather,
    "batch_across_shards": Driver._batch_across_shards,
    "gather_async": Driver._gather,
    "aggregator_input": Driver._aggregator_input,
    "concurrently": Driver._concurrently,
    "duplicate": Driver._duplicate,
}


class Wait:
    """A step of a gather (:meth:`Driver._round_steps`, :meth:`Driver._pass_steps`):
    wait until every one of ``requests`` is done (a round's wait), or until the
    first request of one of ``queues`` is (a pass's; see ``Backend.wait_any``)."""

    __slots__ = ("requests", "queues")

    def __init__(self, requests: list[Request] | None = None,
                 queues: list[Sequence[Request]] | None = None) -> None:
        self.requests = requests
        self.queues = queues


class SyncOutput:
    """A whole plan that is one run pulling a synchronous source, pulled with ``next()``.

    ``items`` is None until :meth:`open` calls the source's factory (on the first
    pull, as the async path does); ``busy.s`` is the run's busy seconds, which the
    caller adds to around each ``next``.
    """

    __slots__ = ("driver", "spec", "items", "busy", "stage")

    def __init__(self, driver: Driver, spec: StageSpec):
        self.driver = driver
        self.spec = spec
        self.items: Any = None
        self.stage, self.busy = driver._stage(spec)

    def open(self) -> Any:
        self.items = self.driver.pull_source(self.spec, self.stage)
        self.driver.agens.append(self.items)
        return self.items


def fetched_items(done: list[Request]) -> Iterator[tuple[Any, Any]]:
    """``(actor, item)`` for each item of a fetch's done requests, in order (a request's
    result is ``(items, ended)``; ``actor`` is its shard's, for ``current_actor``)."""
    for req in done:
        actor = req.shard.actor
        for x in req.result()[0]:
            yield actor, x


def _timed(items: Iterator[Any], busy: "_Busy") -> Iterator[Any]:
    """``items``, the time spent computing each added to ``busy``."""
    items = iter(items)
    while True:
        t = perf()
        try:
            y = next(items)
        except StopIteration:
            return
        finally:
            busy.s += perf() - t
        yield y


class _Busy:
    """Busy seconds of one driver-side run."""

    __slots__ = ("s",)

    def __init__(self) -> None:
        self.s = 0.0
