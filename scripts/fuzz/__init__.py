"""Coverage-guided fuzzing of tracekit's native code under sanitizers (docs/fuzzing.md).

``python scripts/fuzz run --minutes N`` builds the extensions with AddressSanitizer and
UndefinedBehaviorSanitizer (``build.py``), cuts a seed corpus from the traces beside the
repository (``seeds.py``) and runs every harness (``harnesses.py``) under atheris, one process
each; ``python scripts/fuzz coverage`` replays the corpora through a gcov build and reports the
lines of each C file that ran.  ``hostile.py`` makes the structure-aware cases (deep nesting,
megabyte values, gzip bombs, damaged cache entries, hostile SQLite schemas) that the mutation
fuzzer (scripts/fuzz_parsers.py) and the regression tests use.
"""
