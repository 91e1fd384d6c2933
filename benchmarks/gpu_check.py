#!/usr/bin/env python3
"""Everything a GPU machine must prove, in one command, without pip or a network.

1. builds the compiled parts of the engine in place (python3 setup.py build_ext --inplace);
2. runs the whole test suite with the repository on PYTHONPATH (the GPU cases run where
   CuPy sees a device);
3. runs the determinism tests on the GPU alone (the same call 5 times; batch sizes 1, 7,
   33 and all; shuffled users; given scores; results left on the device: bit-identical to
   each other and to the CPU);
4. runs benchmarks/bench_gpu.py (default: 10,000 users x 1,000,000 items x 128 factors),
   benchmarks/bench_gpu_sweep.py (the sweep over 100k, 1M and 10M items and K = 10, 100,
   1,000 in the three modes, training-loop sizes, top_k against torch), and
   benchmarks/bench_training_loop.py on the GPU where torch is installed (the Evaluator's
   share of a training epoch);
5. writes one results file, <out>/gpu_check_<date>_<device>.md (and .json): device,
   driver, CUDA, library versions, commit, the test summaries and the benchmark table.

    python3 benchmarks/gpu_check.py                          # from the repository root
    python3 benchmarks/gpu_check.py --bench-args="--users 2000 --items 200000"

Exit code 0 only when every step passed. The commit comes from git, or from the
GPURECO_COMMIT environment variable where the checkout has no .git.
"""
import argparse
import datetime as dt
import json
import os
import platform
import re
import shlex
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def run(command, env=None, timeout=None):
    """(exit code, output) of a command run from the repository root, echoed as it goes."""
    print("$", " ".join(shlex.quote(c) for c in command), flush=True)
    try:
        done = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired as error:
        output = (error.stdout or b"").decode() if isinstance(error.stdout, bytes) else (error.stdout or "")
        print(output[-4000:], f"\n(timed out after {timeout} s)", flush=True)
        return 124, output + f"\n(timed out after {timeout} s)"
    output = done.stdout + done.stderr
    print(output[-4000:], flush=True)
    return done.returncode, output


def summary_line(output):
    """pytest's closing line ('12 passed, 1 failed in 3.2s'), or the last line."""
    lines = [line.strip("= ") for line in output.strip().splitlines() if line.strip()]
    found = [line for line in lines if re.search(r"\d+ (passed|failed|error)", line)]
    return found[-1] if found else (lines[-1] if lines else "")


def commit():
    try:
        out = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True,
                             timeout=10).stdout.strip()
    except (OSError, subprocess.TimeoutExpired):
        out = ""
    return out or os.environ.get("GPURECO_COMMIT", "unknown")


def environment(env):
    """Device, driver, CUDA and library versions, as the Python that runs the tests sees them."""
    probe = ("import json, platform, numpy, scipy, pandas\n"
             "info = dict(python=platform.python_version(), numpy=numpy.__version__, scipy=scipy.__version__,"
             " pandas=pandas.__version__)\n"
             "try:\n"
             "    import cupy\n"
             "    info['cupy'] = cupy.__version__\n"
             "    rt = cupy.cuda.runtime\n"
             "    name = rt.getDeviceProperties(0)['name']\n"
             "    info['device'] = name.decode() if isinstance(name, bytes) else str(name)\n"
             "    info['driver'] = rt.driverGetVersion(); info['cuda_runtime'] = rt.runtimeGetVersion()\n"
             "except Exception as error:\n"
             "    info['device'] = f'none ({type(error).__name__}: {error})'\n"
             "print(json.dumps(info))\n")
    code, output = run([sys.executable, "-c", probe], env=env)
    info = json.loads(output.strip().splitlines()[-1]) if code == 0 else {"device": f"unknown ({output[-300:]})"}
    try:
        smi = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version,memory.total", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=30).stdout.strip()
        info["nvidia_smi"] = smi
    except (OSError, subprocess.TimeoutExpired):
        pass
    return info


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", default=str(ROOT / "benchmarks" / "results"))
    parser.add_argument("--bench-args", default="", help="arguments for bench_gpu.py")
    parser.add_argument("--sweep-args", default="", help="arguments for bench_gpu_sweep.py ('skip' to skip it)")
    parser.add_argument("--skip-suite", action="store_true", help="only the determinism tests and the benchmark")
    args = parser.parse_args(argv)
    env = {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""),
           "PYTHONUNBUFFERED": "1"}
    steps = {}
    code, output = run([sys.executable, "setup.py", "-q", "build_ext", "--inplace"], env=env)
    steps["build"] = {"ok": code == 0, "summary": "built in place" if code == 0 else output[-2000:]}
    info = environment(env)
    if not args.skip_suite:
        code, output = run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-rfEs", "tests"], env=env)
        failures = [line for line in output.splitlines() if line.startswith(("FAILED", "ERROR"))]
        steps["suite"] = {"ok": code == 0, "summary": summary_line(output), "failures": failures}
    code, output = run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-rA",
                        "tests/engine/test_determinism.py", "-k", "gpu"], env=env)
    ran = len(re.findall(r"^PASSED .*\[gpu\]", output, flags=re.M))
    steps["determinism_on_gpu"] = {"ok": code == 0 and ran > 0, "summary": summary_line(output),
                                   "gpu_cases_passed": ran}
    bench_out = Path(args.out)
    code, output = run([sys.executable, "benchmarks/bench_gpu.py", "--out", str(bench_out),
                        *shlex.split(args.bench_args)], env=env)
    table = [line for line in output.splitlines() if line.startswith("|") or "GEMM" in line or "workspace" in line]
    steps["bench_gpu"] = {"ok": code == 0, "summary": "\n".join(table) if code == 0 else output[-2000:]}
    if args.sweep_args != "skip":
        code, output = run([sys.executable, "benchmarks/bench_gpu_sweep.py", "--out", str(bench_out),
                            *shlex.split(args.sweep_args)], env=env)
        table = [line for line in output.splitlines() if line.startswith(("|", "Targets"))]
        steps["bench_gpu_sweep"] = {"ok": code == 0, "summary": "\n".join(table) if code == 0 else output[-2000:]}
    try:  # the Evaluator's share of a training epoch on the GPU (needs torch)
        import torch  # noqa: F401
    except ImportError:
        steps["bench_training_loop"] = {"ok": True, "summary": "skipped: torch is not installed"}
    else:
        code, output = run([sys.executable, "benchmarks/bench_training_loop.py", "--device", "gpu", "--out",
                            str(bench_out)], env=env)
        table = [line for line in output.splitlines() if line.startswith("|")]
        steps["bench_training_loop"] = {"ok": code == 0, "summary": "\n".join(table) if code == 0 else output[-2000:]}

    date = dt.date.today().isoformat()
    device = str(info.get("device", "none"))
    slug = "no-gpu" if device.startswith(("none", "unknown")) else re.sub(r"[^A-Za-z0-9]+", "-", device).strip("-")[:40]
    record = {"date": date, "commit": commit(), "host": f"{platform.node()} ({os.cpu_count()} cores)",
              "command": "python3 " + " ".join(shlex.quote(a) for a in [sys.argv[0], *(argv or sys.argv[1:])]),
              "environment": info, "steps": steps, "ok": all(step["ok"] for step in steps.values())}
    lines = [f"# GPU check {date}: {'passed' if record['ok'] else 'FAILED'}", "",
             f"Device: {info.get('device')}; nvidia-smi: {info.get('nvidia_smi', 'n/a')}",
             f"Driver {info.get('driver')}, CUDA runtime {info.get('cuda_runtime')}, CuPy {info.get('cupy')}, "
             f"NumPy {info.get('numpy')}, SciPy {info.get('scipy')}, pandas {info.get('pandas')}, "
             f"Python {info.get('python')}", f"Commit {record['commit']}; command `{record['command']}`", ""]
    for name, step in steps.items():
        lines += [f"## {name}: {'ok' if step['ok'] else 'FAILED'}", "", step["summary"], ""]
        lines += [f"- {failure}" for failure in step.get("failures", [])]
    bench_out.mkdir(parents=True, exist_ok=True)
    stem = bench_out / f"gpu_check_{date}_{slug}"
    stem.with_suffix(".json").write_text(json.dumps(record, indent=2))
    stem.with_suffix(".md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    print(f"written: {stem}.md and .json")
    return 0 if record["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
