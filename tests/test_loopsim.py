"""The loop simulator itself (tests/loopsim): the original scenarios' traces and truths stay
exactly as they were while the simulator learns new behaviours."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from loopsim import INTERMITTENT, SCENARIOS, mean_truth, simulate, truth
from loopsim.jobsim import JOBS, simulate_job
from loopsim.kineto import kineto_events

BASELINE = Path(__file__).parent / "data" / "loopsim_baseline.json"
#: the fixes the original scenarios' truths were recorded for
ORIGINAL_FIXES = ("data_loading", "host_device_sync", "pageable_memcpy", "launch_bound", "allocator", "no_tensor_cores", "cpu_bound")


def _digest(obj: object) -> str:
    return hashlib.sha256(json.dumps(obj).encode()).hexdigest()


def test_original_scenarios_write_the_same_traces_and_truths() -> None:
    # fingerprints taken on the simulator before it learned the behaviours below: every
    # original scenario's trace, step and fixed steps, and every job's traces, to the byte
    baseline = json.loads(BASELINE.read_text())
    loops = {**SCENARIOS, **INTERMITTENT}
    assert set(baseline["loops"]) == set(loops)
    for name, (loop, _) in loops.items():
        run = simulate(loop)
        want = baseline["loops"][name]
        assert _digest(kineto_events(run)) == want["trace"], name
        assert [run.steady_step_ns, run.mean_steady_step_ns] == [want["step_ns"], want["mean_step_ns"]], name
        for fix in ORIGINAL_FIXES:
            assert [truth(loop, fix), mean_truth(loop, fix)] == want["fixed_step_ns"][fix], (name, fix)
    assert set(baseline["jobs"]) == set(JOBS)
    for name, spec in JOBS.items():
        jr = simulate_job(spec)
        assert _digest([kineto_events(r) for r in jr.runs]) == baseline["jobs"][name]["traces"], name
        assert jr.steady_step_ns == baseline["jobs"][name]["step_ns"], name
