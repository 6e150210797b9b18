"""Compiling and executing plans: the compiler, the asyncio driver runtime and its backends.

Importing this package installs the runtime as what ``Plan.compile`` calls
(``graph.plan.set_compiler``): the plan layer below never imports it. The run
module itself loads on the first compile, so a process that only hosts shards
(a Ray worker) does not load the driver.
"""

from flowrl.graph.plan import set_compiler


def compile_run(plan, backend="auto", **settings):
    """``plan.compile(backend, **settings)``: see :func:`flowrl.runtime.run.compile_run`."""
    from flowrl.runtime.run import compile_run as compile_and_start
    return compile_and_start(plan, backend, **settings)


set_compiler(compile_run)
