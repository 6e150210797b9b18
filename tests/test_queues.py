"""Enqueue/Dequeue: bridging a plan and a thread through a plain queue.Queue.

Waits are woken by the thread's own put/get: no thread blocks on the queue for the
plan and nothing polls it. A dead or stuck other side fails the run with a FlowError
naming it. Timeouts here are generous and only catch hangs.
"""

from __future__ import annotations

import queue
import threading
import time

import pytest

import flowrl
from flowrl import Concurrently, ConfigError, FlowError, OperatorError, Plan
from flowrl.ops import Dequeue, Enqueue


@pytest.fixture(params=["local", pytest.param("ray", marks=pytest.mark.ray)])
def backend(request):
    if request.param == "ray":
        request.getfixturevalue("ray_session")
    return request.param


class CountingQueue(queue.Queue):
    """Counts the plan's attempts to take an item (each get/get_nowait call)."""

    def __init__(self, maxsize=0):
        super().__init__(maxsize)
        self.gets = 0

    def get(self, block=True, timeout=None):
        self.gets += 1
        return super().get(block, timeout)


def _in_thread(fn):
    out, errors = [], []

    def target():
        try:
            out.append(fn())
        except BaseException as e:  # noqa: BLE001 - handed to the test
            errors.append(e)

    t = threading.Thread(target=target, daemon=True)
    t.start()
    return t, out, errors


def test_learner_round_trip_on_both_backends(backend):
    """A learner thread made before the run, fed and drained through its queues."""
    inq, outq = queue.Queue(maxsize=2), queue.Queue()

    def learner():
        while (x := inq.get()) is not None:
            time.sleep(0.002)  # the learner is slower than the plan: queues fill up
            outq.put(x * 10)

    thread = threading.Thread(target=learner, daemon=True)
    thread.start()
    enqueue = flowrl.from_range(30, 3).gather_async().for_each(
        Enqueue(inq, check=thread.is_alive, timeout=60, label="learner"))
    results = Dequeue(outq, check=thread.is_alive, timeout=60, label="learner")
    plan = Plan(Concurrently([enqueue, results], mode="async", output_indexes=[1]))
    with plan.compile(backend=backend) as run:
        assert sorted(run.take(30)) == [10 * i for i in range(30)]
    inq.put(None)
    thread.join(timeout=10)


def test_an_idle_dequeue_waits_without_polling_and_wakes_on_put():
    q = CountingQueue()
    run = Plan(Dequeue(q)).compile()
    threads_before = set(threading.enumerate())
    t, out, errors = _in_thread(lambda: next(run))
    time.sleep(0.5)  # ample time for a timed poll to show up in the count
    assert t.is_alive() and q.gets == 1
    # Only the test's own thread is new (threads left by earlier tests may end meanwhile).
    assert set(threading.enumerate()) - threads_before == {t}
    q.put("late")
    t.join(timeout=10)
    assert (out, errors, q.gets) == (["late"], [], 2)
    run.stop()


def test_a_full_enqueue_waits_without_polling_and_wakes_on_get():
    q = queue.Queue(maxsize=1)
    q.put("old")
    run = Plan(flowrl.from_iterable(lambda: ["new"]).for_each(Enqueue(q))).compile()
    t, out, errors = _in_thread(lambda: next(run))
    time.sleep(0.3)
    assert t.is_alive() and q.qsize() == 1
    assert q.get(timeout=5) == "old"
    t.join(timeout=10)
    assert (out, errors, q.get_nowait()) == (["new"], [], "new")
    run.stop()


def test_one_queue_serves_runs_one_after_another():
    q = queue.Queue()
    for i in range(4):
        q.put(i)
    with Plan(Dequeue(q)).compile() as first:
        assert first.take(2) == [0, 1]
    with Plan(Dequeue(q)).compile() as second:
        assert second.take(2) == [2, 3]
        t, out, _ = _in_thread(lambda: next(second))
        q.put(4)
        t.join(timeout=10)
    assert out == [4]


def test_dequeue_fails_at_once_when_the_producer_is_dead():
    run = Plan(Dequeue(queue.Queue(), check=lambda: False, label="learner thread 'lt'")).compile()
    with pytest.raises(OperatorError, match=r"'dequeue'.*learner thread 'lt' is no longer "
                                            r"running \(check\(\) returned False\)") as info:
        next(run)
    assert isinstance(info.value.__cause__, FlowError)


def test_dequeue_fails_when_the_producer_dies_while_it_waits():
    q = queue.Queue()

    def producer():
        q.put("only")  # then the thread ends without another item

    thread = threading.Thread(target=producer)
    thread.start()
    thread.join()
    run = Plan(Dequeue(q, check=thread.is_alive, label="learner thread 'lt'")).compile()
    assert next(run) == "only"
    with pytest.raises(OperatorError, match="learner thread 'lt' is no longer running"):
        next(run)


def test_a_producer_that_dies_later_is_noticed():
    q = queue.Queue()
    alive = threading.Event()
    alive.set()
    run = Plan(Dequeue(q, check=alive.is_set, label="producer 'p'")).compile()
    t, out, errors = _in_thread(lambda: next(run))
    time.sleep(0.2)
    alive.clear()  # "dies" while the plan waits; noticed at the next liveness check
    t.join(timeout=30)
    assert out == [] and len(errors) == 1
    assert "producer 'p' is no longer running" in str(errors[0])


def test_dequeue_timeout_names_the_label_and_the_setting():
    label = "learner thread 'learner' (learner_queue_timeout=0.3)"
    run = Plan(Dequeue(queue.Queue(), timeout=0.3, label=label)).compile()
    with pytest.raises(OperatorError, match=r"learner thread 'learner' \(learner_queue_timeout="
                                            r"0\.3\) put no item for 0\.3 s \(timeout=0\.3\)"):
        next(run)


def test_enqueue_timeout_and_dead_consumer():
    full = queue.Queue(maxsize=1)
    full.put(0)
    stuck = Plan(flowrl.from_iterable(lambda: [1]).for_each(
        Enqueue(full, timeout=0.2, label="learner 'l'"))).compile()
    with pytest.raises(OperatorError, match=r"learner 'l' took no item for 0\.2 s"):
        next(stuck)
    dead = Plan(flowrl.from_iterable(lambda: [1]).for_each(
        Enqueue(full, check=lambda: False, label="learner 'l'"))).compile()
    with pytest.raises(OperatorError, match=r"learner 'l' is no longer running.*for room"):
        next(dead)


def test_queue_arguments_are_checked():
    with pytest.raises(ConfigError, match=r"Dequeue\(queue=.*expected a queue.Queue"):
        Dequeue([1, 2])
    with pytest.raises(ConfigError, match=r"Enqueue\(timeout=0\): must be a number of seconds"):
        Enqueue(queue.Queue(), timeout=0)
    with pytest.raises(ConfigError, match=r"Dequeue\(check=3\): must be a zero-argument"):
        Dequeue(queue.Queue(), check=3)
    with pytest.raises(ConfigError, match=r"Enqueue\(label=5\)"):
        Enqueue(queue.Queue(), label=5)


def test_stop_while_waiting_on_an_empty_queue_releases_everything():
    q = queue.Queue()
    run = Plan(Concurrently([Dequeue(q), flowrl.from_iterable(lambda: [1, 2, 3])],
                            mode="async")).compile()
    assert run.take(3) == [1, 2, 3]
    run.stop()
    q.put("after")  # the stopped run's waiter is gone: nothing is woken or lost
    assert q.get_nowait() == "after"
    assert q.__dict__["_flowrl_watch"].getters == []
