"""Where the per-trace work runs: in this process, a local process pool, or a Ray cluster.

Every engine runs the same function (:func:`tracekit.batch.work.analyze_file`) on the same
tasks and hands each :class:`FileResult` to ``on_result`` as it completes, so the tables a
batch writes do not depend on the engine.  ``on_result`` returns False to stop early
(``--fail-fast``); tasks not started then are left out.

* ``local``: ``workers == 1`` runs in this process; more use a
  :class:`concurrent.futures.ProcessPoolExecutor` with the ``spawn`` start method (polars is
  not fork-safe).  At most ``2 × workers`` tasks are in flight, largest files first.  If a
  worker dies (killed for memory), the pool is rebuilt and the files that were in flight are
  retried one at a time, so only the file that kills a worker on its own gets an error row.
* ``ray``: one Ray task per file (``num_cpus=1``) on the cluster at ``address``, or on a
  local Ray instance started for the batch (with ``workers`` CPUs) when no address is given.
  Files are read by path: on a cluster they must be on storage every node sees.
"""

from __future__ import annotations

import multiprocessing
from collections.abc import Callable, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from typing import Any

from ..errors import MissingDependencyError, UsageError
from .work import FileResult, Task, analyze_file

OnResult = Callable[[FileResult], bool]

ENGINES = ("local", "ray")


def run_tasks(tasks: Sequence[Task], on_result: OnResult, *, engine: str = "local", workers: int = 1, ray_address: str | None = None) -> None:
    """Run ``tasks`` on ``engine`` and report each result (see the module docstring)."""
    ordered = sorted(tasks, key=lambda t: (-t.size_bytes, t.path))
    if engine == "local":
        if workers <= 1:
            _run_inline(ordered, on_result)
        else:
            _run_pool(ordered, on_result, workers)
    elif engine == "ray":
        _run_ray(ordered, on_result, workers=workers, address=ray_address)
    else:
        raise UsageError(f"unknown engine {engine!r} (expected one of {', '.join(ENGINES)})")


def _run_inline(tasks: Sequence[Task], on_result: OnResult) -> None:
    for task in tasks:
        if not on_result(analyze_file(task)):
            return


def _warm() -> None:
    # import the analysis stack once per worker, before the first task arrives
    import tracekit.analysis
    import tracekit.reader  # noqa: F401


def _crashed(task: Task, detail: str) -> FileResult:
    return FileResult(
        path=task.path, content_hash=task.content_hash, size_bytes=task.size_bytes, mtime_ns=task.mtime_ns,
        error=f"the worker analysing this file died ({detail}); the file may need more memory than is available",
        error_kind="worker_crash",
    )


def _run_pool(tasks: Sequence[Task], on_result: OnResult, workers: int) -> None:
    ctx = multiprocessing.get_context("spawn")
    queue = list(reversed(tasks))  # pop() takes the largest first
    limit = 2 * workers
    delivered = 0
    while queue:
        suspects: list[Task] = []
        with ProcessPoolExecutor(max_workers=workers, mp_context=ctx, initializer=_warm) as pool:
            running: dict[Future[FileResult], Task] = {}
            try:
                while queue or running:
                    while queue and len(running) < limit:
                        task = queue.pop()
                        running[pool.submit(analyze_file, task)] = task
                    done, _ = wait(list(running), return_when=FIRST_COMPLETED)
                    for fut in done:
                        result = fut.result()  # raises BrokenProcessPool while fut is still in `running`
                        running.pop(fut)
                        delivered += 1
                        if not on_result(result):
                            for other in running:
                                other.cancel()
                            queue.clear()
                            return
            except BrokenProcessPool:
                suspects = [t for f, t in running.items() if not (f.done() and not f.cancelled() and f.exception() is None)]
                # results that did arrive before the break are still good
                for fut in list(running):
                    if fut.done() and not fut.cancelled() and fut.exception() is None:
                        delivered += 1
                        if not on_result(fut.result()):
                            return
        # retry each file that was in flight alone: the one that kills a worker by itself fails
        for task in suspects:
            result = _run_isolated(task, ctx)
            if result.error_kind == "worker_crash" and not delivered:
                raise UsageError(
                    "the worker processes could not start or died before analysing any file",
                    hint="when calling tracekit.batch.run_batch from a script, put the call under "
                    "`if __name__ == \"__main__\":` (workers are started with the spawn method); or use workers=1",
                )
            delivered += 1
            if not on_result(result):
                return


def _run_isolated(task: Task, ctx: Any) -> FileResult:
    with ProcessPoolExecutor(max_workers=1, mp_context=ctx) as pool:
        try:
            return pool.submit(analyze_file, task).result()
        except BrokenProcessPool as exc:
            return _crashed(task, str(exc) or "killed")


def import_ray() -> Any:
    """The ``ray`` module, or MissingDependencyError naming the extra to install."""
    try:
        import ray
    except ImportError as exc:
        raise MissingDependencyError(
            "the Ray engine needs the ray package, which is not installed",
            hint="pip install 'tracekit[ray]'",
        ) from exc
    return ray


def _run_ray(tasks: Sequence[Task], on_result: OnResult, *, workers: int, address: str | None) -> None:
    ray = import_ray()
    started = False
    if not ray.is_initialized():
        kwargs: dict[str, Any] = {"include_dashboard": False, "log_to_driver": False, "configure_logging": False}
        if address:
            kwargs["address"] = address
        else:
            kwargs["num_cpus"] = max(workers, 1)
        try:
            ray.init(**kwargs)
        except Exception as exc:
            raise UsageError(f"could not start or reach Ray{' at ' + address if address else ''}: {exc}") from exc
        started = True
    try:
        remote = ray.remote(num_cpus=1, max_retries=1)(analyze_file)
        cpus = int(ray.cluster_resources().get("CPU", workers) or workers)
        limit = max(2 * cpus, 2)
        queue = list(reversed(tasks))
        running: dict[Any, Task] = {}
        while queue or running:
            while queue and len(running) < limit:
                task = queue.pop()
                running[remote.remote(task)] = task
            done, _ = ray.wait(list(running), num_returns=1)
            for ref in done:
                task = running.pop(ref)
                try:
                    result = ray.get(ref)
                except Exception as exc:  # the worker died or Ray lost the task
                    result = _crashed(task, type(exc).__name__)
                if not on_result(result):
                    for other in running:
                        ray.cancel(other)
                    return
    finally:
        if started:
            ray.shutdown()


__all__ = ["ENGINES", "import_ray", "run_tasks"]
