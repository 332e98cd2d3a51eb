"""Where the per-trace work runs: in this process, a local process pool, or a Ray cluster.

Every engine runs the same function (:func:`tracekit.batch.work.analyze_file`) on the same
tasks and hands each :class:`FileResult` to ``on_result`` as it completes, so the tables a
batch writes do not depend on the engine.  ``on_result`` returns False to stop early
(``--fail-fast``); tasks not started then are left out.

* ``local``: ``workers == 1`` (without a memory limit) runs in this process; otherwise
  ``workers`` worker processes, started with the ``spawn`` method (polars is not fork-safe),
  each analyse one file at a time, largest files first.  The driver knows which file each
  worker holds, so a worker killed by the OS (SIGKILL from the out-of-memory killer) costs
  exactly that file: it gets a ``worker_crash`` error row, a new worker takes its place and
  the others go on.  (A :class:`concurrent.futures.ProcessPoolExecutor` cannot do this: one
  dead worker breaks the whole pool and every file in flight.)  With a per-file memory
  limit, a watchdog reads each busy worker's resident memory every 0.1 s and kills a worker
  over the limit (``memory_limit`` error row); see :func:`_run_pool` for why RSS rather
  than ``RLIMIT_AS``.
* ``ray``: one Ray task per file (``num_cpus=1``) on the cluster at ``address``, or on a
  local Ray instance started for the batch (with ``workers`` CPUs) when no address is given.
  Files are read by path: on a cluster they must be on storage every node sees.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import re
import signal
import time
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass
from multiprocessing.connection import Connection
from multiprocessing.connection import wait as mp_wait
from typing import Any

from ..errors import MissingDependencyError, UsageError
from .work import FileResult, Task, analyze_file

OnResult = Callable[[FileResult], bool]

ENGINES = ("local", "ray")


def run_tasks(
    tasks: Sequence[Task], on_result: OnResult, *, engine: str = "local", workers: int = 1, ray_address: str | None = None,
    max_memory: int | None = None, on_start: Callable[[Task], None] | None = None, isolate: Collection[str] = (),
) -> None:
    """Run ``tasks`` on ``engine`` and report each result (see the module docstring).

    In this process (local, one worker, no memory limit), ``on_start`` is called before each
    file, and the files whose content hash is in ``isolate`` (those a previous run died
    on) run first, each in a worker process of its own, so a file that kills its process
    becomes an error row instead of ending the batch again.
    """
    ordered = sorted(tasks, key=lambda t: (-t.size_bytes, t.path))
    if engine == "local" and max_memory is not None:
        if max_memory <= 0:
            raise UsageError(f"the memory limit must be positive (got {max_memory})")
        if resident_bytes(os.getpid()) is None:
            raise UsageError("--max-memory-per-file reads each worker's memory from /proc, which this system does not have (Linux only)")
    if engine == "local":
        if workers <= 1 and max_memory is None:
            suspects = [t for t in ordered if t.content_hash in isolate]
            if suspects and not _run_pool(suspects, on_result, 1):
                return
            _run_inline([t for t in ordered if t.content_hash not in isolate], on_result, on_start)
        else:
            _run_pool(ordered, on_result, workers, max_memory)
    elif engine == "ray":
        if max_memory is not None:
            raise UsageError(
                "--max-memory-per-file applies to the local engine",
                hint="on Ray, the nodes' memory monitor stops tasks that run the node out of memory (each becomes an error row)",
            )
        _run_ray(ordered, on_result, workers=workers, address=ray_address)
    else:
        raise UsageError(f"unknown engine {engine!r} (expected one of {', '.join(ENGINES)})")


def _run_inline(tasks: Sequence[Task], on_result: OnResult, on_start: Callable[[Task], None] | None = None) -> None:
    for task in tasks:
        if on_start is not None:
            on_start(task)
        _fault_hook(task)
        if not on_result(analyze_file(task)):
            return


def _warm() -> None:
    # import the analysis stack once per worker, before the first task arrives
    import tracekit.analysis
    import tracekit.reading.trace  # noqa: F401


def _crashed(task: Task, detail: str) -> FileResult:
    return FileResult(
        path=task.path, content_hash=task.content_hash, size_bytes=task.size_bytes, mtime_ns=task.mtime_ns,
        error=f"the worker analysing this file died ({detail}); the file may need more memory than is available",
        error_kind="worker_crash",
    )


def _over_memory(task: Task, rss: int, limit: int) -> FileResult:
    return FileResult(
        path=task.path, content_hash=task.content_hash, size_bytes=task.size_bytes, mtime_ns=task.mtime_ns,
        error=f"stopped: the worker analysing this file used {format_size(rss)} of memory, over the limit of "
        f"{format_size(limit)} (--max-memory-per-file)",
        error_kind="memory_limit",
    )


def format_size(n: int) -> str:
    """``1.5 GiB``, ``512 MiB`` (binary units, as --max-memory-per-file takes them)."""
    if n >= 1 << 30:
        return f"{n / (1 << 30):.1f} GiB"
    return f"{n / (1 << 20):.0f} MiB"


def parse_size(text: str) -> int:
    """Bytes from ``4G``, ``4GiB``, ``512M``, ``512MB``, ``1.5g`` or a plain number of bytes (K, M, G, T are binary).

    >>> parse_size("4G"), parse_size("512MiB"), parse_size("1.5g"), parse_size("1000")
    (4294967296, 536870912, 1610612736, 1000)
    """
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([kmgt]?)(?:i?b)?\s*", text, flags=re.IGNORECASE)
    if m is None:
        raise UsageError(f"not a size: {text!r}", hint="give a size such as 4G, 512M or 1.5GiB")
    unit = m.group(2).lower()
    value = float(m.group(1)) * (1024 ** (1 + "kmgt".index(unit)) if unit else 1)
    if value < 1:
        raise UsageError(f"not a size: {text!r}", hint="give a size such as 4G, 512M or 1.5GiB")
    return int(value)


def resident_bytes(pid: int) -> int | None:
    """Resident memory (RSS) of process ``pid`` from /proc, or None when it cannot be read (gone, not Linux)."""
    try:
        with open(f"/proc/{pid}/statm", "rb") as fh:
            return int(fh.read().split()[1]) * _PAGE
    except (OSError, ValueError, IndexError):
        return None


_PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096
#: seconds between two looks at the workers' memory (with a memory limit)
WATCH_S = 0.1
#: environment variable of the fault hooks the tests use (see :func:`_fault_hook`)
FAULT_ENV = "TRACEKIT_BATCH_TEST_FAULT"


def _fault_hook(task: Task) -> None:
    """Test-only faults, set with ``TRACEKIT_BATCH_TEST_FAULT=ACTION:PART[:MB]`` for files whose path contains PART.

    ``kill``: the process analysing the file (a worker, or the batch itself with one
    worker) SIGKILLs itself, as the out-of-memory killer would; ``balloon``:
    it holds MB mebibytes of memory for a minute; ``stall``: it sleeps ten minutes.
    """
    spec = os.environ.get(FAULT_ENV)
    if not spec:
        return
    action, _, rest = spec.partition(":")
    part, _, amount = rest.partition(":")
    if not part or part not in task.path:
        return
    if action == "kill":
        os.kill(os.getpid(), signal.SIGKILL)
    elif action == "balloon":
        ballast = b"x" * (int(amount or "1024") << 20)  # written, so resident
        time.sleep(60)
        del ballast
    elif action == "stall":
        time.sleep(600)


def _worker_main(conn: Connection) -> None:
    """One worker process: analyse the tasks the parent sends, one at a time, until told to stop."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's to handle: it stops the workers
    _warm()
    try:
        conn.send(("ready", None))
        while True:
            task = conn.recv()
            if task is None:
                return
            _fault_hook(task)
            conn.send(("result", analyze_file(task)))
    except (EOFError, BrokenPipeError, ConnectionResetError):
        return  # the parent is gone: nothing to report to


@dataclass
class _Worker:
    process: Any
    conn: Connection
    ready: bool = False
    task: Task | None = None


def _death(process: Any) -> str:
    code = process.exitcode
    if code is not None and code < 0:
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = f"signal {-code}"
        why = " (the kernel's out-of-memory killer sends it)" if -code == signal.SIGKILL else ""
        return f"killed by {name}{why}"
    return f"exit status {code}"


def _run_pool(tasks: Sequence[Task], on_result: OnResult, workers: int, max_memory: int | None = None) -> bool:
    """Run ``tasks`` on ``workers`` worker processes, each analysing one file at a time.

    The driver knows which file each worker holds, so a worker that dies (killed by the OS,
    out of memory) costs exactly that file, which gets an error row; a new worker takes its
    place and the others go on undisturbed.  With ``max_memory``, each busy worker's
    resident memory is checked every :data:`WATCH_S` seconds and a worker over the limit is
    killed (the file gets a ``memory_limit`` error row); a worker that stays above half the
    limit after a file is replaced, so memory kept by one file is not charged to the next.

    Why a watchdog on RSS and not ``RLIMIT_AS``: the address-space limit counts virtual
    memory, and polars' allocator and thread pools reserve far more address space than they
    touch, so a limit that matters for RSS fails healthy files; and when native code hits it,
    the allocation failure aborts the process instead of raising.  RSS is what the
    out-of-memory killer weighs; the cost is that a spike shorter than the 0.1 s watch
    interval can pass the limit unseen, and memory of child processes (``nsys export``) is
    not counted.
    """
    ctx = multiprocessing.get_context("spawn")
    queue = list(reversed(tasks))  # pop() takes the largest first
    pool: list[_Worker] = []
    failed_starts = 0

    def start() -> None:
        parent, child = ctx.Pipe()
        process = ctx.Process(target=_worker_main, args=(child,), name="tracekit-batch-worker", daemon=True)
        process.start()
        child.close()
        pool.append(_Worker(process, parent))

    def retire(w: _Worker, kill: bool = False) -> None:
        pool.remove(w)
        if kill:
            w.process.kill()
        else:
            with contextlib.suppress(OSError, ValueError):
                w.conn.send(None)
        w.process.join(timeout=None if kill else 5)
        if w.process.is_alive():
            w.process.kill()
            w.process.join()
        w.conn.close()

    def feed(w: _Worker) -> None:
        if w.ready and w.task is None and queue:
            task = queue.pop()
            try:
                w.conn.send(task)
            except (OSError, ValueError):  # it died while idle: the file waits for another worker
                queue.append(task)
                return
            w.task = task

    def top_up() -> None:
        busy = sum(1 for w in pool if w.task is not None)
        idle = len(pool) - busy
        while len(pool) < workers and len(queue) > idle:
            start()
            idle += 1

    try:
        top_up()
        while queue or any(w.task is not None for w in pool):
            for w in pool:
                feed(w)
            mp_wait([w.conn for w in pool] + [w.process.sentinel for w in pool], timeout=WATCH_S if max_memory else None)
            for w in list(pool):
                alive = True
                while alive and w.conn.poll():
                    try:
                        kind, payload = w.conn.recv()
                    except (EOFError, OSError):
                        alive = False
                        break
                    if kind == "ready":
                        w.ready = True
                        feed(w)
                        continue
                    w.task = None
                    if max_memory is not None and (resident_bytes(w.process.pid) or 0) > max_memory // 2:
                        retire(w)
                        alive = False
                    else:
                        feed(w)  # the next file first: the worker works while the result is recorded
                    if not on_result(payload):
                        return False
                if w not in pool:
                    continue
                if not alive or not w.process.is_alive():
                    w.process.join(timeout=5)  # its pipe closed: it is exiting
                    why = _death(w.process) if w.process.exitcode is not None else "its connection to the batch broke"
                    held, ready = w.task, w.ready
                    retire(w, kill=True)
                    if held is not None:
                        if not on_result(_crashed(held, why)):
                            return False
                    elif not ready:
                        failed_starts += 1
                        if failed_starts >= max(2, workers):
                            raise UsageError(
                                f"the worker processes could not start ({why})",
                                hint="when calling tracekit.batch.run_batch from a script, put the call under "
                                "`if __name__ == \"__main__\":` (workers are started with the spawn method); or use workers=1",
                            )
                    continue
                if max_memory is not None and w.task is not None:
                    rss = resident_bytes(w.process.pid)
                    if rss is not None and rss > max_memory:
                        held = w.task
                        retire(w, kill=True)
                        if not on_result(_over_memory(held, rss, max_memory)):
                            return False
            top_up()
        return True
    finally:
        for w in list(pool):
            retire(w, kill=w.task is not None)


def import_ray() -> Any:
    """The ``ray`` module, or MissingDependencyError naming the extra to install."""
    try:
        import ray
    except ImportError as exc:
        raise MissingDependencyError(
            "the Ray engine needs the ray package, which is not installed",
            hint="pip install 'tracekit-gpu[ray]'",
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
