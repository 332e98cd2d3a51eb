#!/usr/bin/env bash
# Creates the benchmark virtualenv: tracekit (editable) plus Holistic Trace Analysis, the
# peer tool that scripts/bench_parse.py and scripts/hta_reference.py measure against.
# HTA is a benchmark-only dependency: it is never added to tracekit's own requirements.
#
#   scripts/bench_env.sh                 # creates .bench-venv/ in the repository (git-ignored)
#   scripts/bench_env.sh /tmp/bench-venv # or anywhere else
#   BENCH_PYTHON=python3.12 scripts/bench_env.sh
#
# Then: .bench-venv/bin/python scripts/bench_parse.py
set -euo pipefail
cd "$(dirname "$0")/.."
VENV="${1:-.bench-venv}"
PYTHON="${BENCH_PYTHON:-python3}"
# PyPI publishes HTA as "HolisticTraceAnalysis" (import name: hta). 0.5.0 is the newest release.
HTA_VERSION="${HTA_VERSION:-0.5.0}"

if [ ! -x "$VENV/bin/python" ]; then
  "$PYTHON" -m venv "$VENV"
fi
"$VENV/bin/python" -m pip install --quiet --upgrade pip
"$VENV/bin/python" -m pip install --quiet -e ".[nsight]"  # the Arrow SQLite reader for Nsight exports
# HTA 0.5.0 asks only for pandas>=1.5.2, so pip would pick pandas 3, on which HTA's parser
# crashes for some traces: it writes correlation row numbers into an int8-downcast column,
# which pandas 2 only warns about (FutureWarning) and pandas 3 refuses ("TypeError: Invalid
# value ... for dtype 'int8'", e.g. on tracelens/torch_compile_triton). Pin pandas below 3.
PANDAS_SPEC="${PANDAS_SPEC:-pandas<3}"
"$VENV/bin/python" -m pip install --quiet "HolisticTraceAnalysis==${HTA_VERSION}" "$PANDAS_SPEC"
"$VENV/bin/python" - <<'EOF'
import importlib.metadata as md
for dist in ("tracekit-gpu", "HolisticTraceAnalysis", "pandas", "polars", "msgspec"):
    print(f"{dist:24} {md.version(dist)}")
import hta.trace_analysis  # noqa: F401  (fails loudly here rather than mid-benchmark)
EOF
echo "benchmark venv ready: $VENV"
