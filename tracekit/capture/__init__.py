"""``tracekit capture``: run an unmodified training command and leave traces behind.

Two halves talk through the environment (:mod:`tracekit.capture.config`):

* the **wrapper** (:mod:`tracekit.capture.runner`, used by the ``tracekit capture`` command)
  starts the command with the configuration in ``TRACEKIT_CAPTURE`` and a bootstrap
  ``sitecustomize`` first on ``PYTHONPATH``, waits for it, and writes ``metadata.json``;
* every Python process of the command (``python``, ``torchrun`` workers, spawned ranks)
  runs the bootstrap, which waits for ``import torch`` (:mod:`tracekit.capture.importhook`)
  and then instruments training (:mod:`tracekit.capture.runtime`,
  :mod:`tracekit.capture.torch_hooks`): NVTX and ``record_function`` ranges around every
  DataLoader fetch, forward, backward and optimizer step, numbered steps ending at each
  optimizer step, and a profiler following a step schedule.

This package's ``__init__`` imports nothing: the bootstrap runs in every child process.
"""
