"""Helpers for tests that kill real Ray actors."""

from __future__ import annotations

import time


def kill(actor) -> None:
    """``ray.kill`` and wait until the actor is dead (the kill itself is asynchronous)."""
    import ray
    ray.kill(actor, no_restart=True)
    deadline = time.monotonic() + 60   # only catches a kill that never takes effect
    while time.monotonic() < deadline:
        try:
            ray.get(actor.flowrl_ping.remote(), timeout=60)
        except ray.exceptions.RayActorError:
            return
        time.sleep(0.05)
    raise AssertionError(f"{actor} is still alive 60 s after ray.kill")
