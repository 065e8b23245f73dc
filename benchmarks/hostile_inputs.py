"""Time the hostile inputs of issues 12 and 13 through the console script.

Each case must answer within ``--target`` seconds of wall time (default 1.0), with exit code 1
or 2, exactly one line on stderr and no traceback. Run by hand on a quiet machine:

    python benchmarks/hostile_inputs.py              # every case once
    python benchmarks/hostile_inputs.py -n 5         # median of 5 runs each
    python benchmarks/hostile_inputs.py --target 1.5

The exit code is 0 when every case meets the contract and the target.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
MODELS = ROOT / "configs" / "models"
FIXTURES = ROOT / "tests" / "fixtures" / "hf"
TPCALC = Path(sys.executable).with_name("tpcalc")


def _model(tmp: Path, name: str, base: str, **changes) -> str:
    data = yaml.safe_load((MODELS / f"{base}.yaml").read_text())
    data.update(changes)
    data = {k: v for k, v in data.items() if v is not None}
    path = tmp / f"{name}.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return str(path)


def _hf(tmp: Path, name: str, fixture: str, **changes) -> str:
    data = json.loads((FIXTURES / f"{fixture}.json").read_text()) | changes
    folder = tmp / name
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(data))
    return str(folder)


def cases(tmp: Path) -> dict[str, list[str]]:
    nested = tmp / "nested.json"
    nested.write_text('{"model_type": "llama", "x": ' + "[" * 100_000 + "]" * 100_000 + "}")
    large = tmp / "large.yaml"
    with large.open("w") as f:  # a 25 MB YAML (issue 13 §2: minutes to locate an error)
        f.write((MODELS / "llama3-70b.yaml").read_text())
        f.write("layer_types:\n" + "  - full_attention\n" * 1_300_000)
    fifo = tmp / "pipe.yaml"
    if hasattr(os, "mkfifo"):
        os.mkfifo(fifo)
    found = {
        "long name": ["verify", "-m", "a" * 300],
        "/dev/zero": ["show", "/dev/zero"],
        "/dev/urandom model": ["memory", "--model", "/dev/urandom"],
        "/dev/urandom hardware": ["comm", "--hardware", "/dev/urandom"],
        "FIFO": ["show", str(fifo)],
        "deep JSON": ["show", str(nested)],
        "25 MB YAML": ["show", str(large)],
        "model_type object": ["show", _hf(tmp, "mt", "qwen2-7b", model_type={"a": 1})],
        "moe_layer_freq string": ["show", _hf(tmp, "freq", "deepseek-v3", moe_layer_freq="2")],
        "10^12 layers": ["show", _hf(tmp, "layers", "deepseek-v3", num_hidden_layers=10**12)],
        "heads 10^9 (check)": [
            "check", "-m", _model(tmp, "heads", "llama3-70b", num_attention_heads=10**9),
        ],
        "moe width 2^64 (dp)": [
            "dp", "-m", _model(tmp, "moe", "deepseek-v3", moe_intermediate_size=2**64),
        ],
        "hidden 8, 64 heads": [
            "memory", "-m", _model(tmp, "h8", "llama3-70b", hidden_size=8, head_dim=None),
        ],
        "verify --intermediate 1000000001": ["verify", "--intermediate", "1000000001"],
    }  # fmt: skip
    if not fifo.exists():
        found.pop("FIFO")
    return found


def run_once(args: list[str], timeout: float) -> tuple[float, float, subprocess.CompletedProcess]:
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    done = subprocess.run([str(TPCALC), *args], capture_output=True, text=True, timeout=timeout)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime
    return wall, cpu, done


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-n", type=int, default=1, help="runs per case (median reported)")
    parser.add_argument("--target", type=float, default=1.0, help="max wall seconds per case")
    opts = parser.parse_args()
    failures = 0
    with tempfile.TemporaryDirectory() as tmp:
        for label, args in cases(Path(tmp)).items():
            runs = [run_once(args, timeout=30 * opts.target) for _ in range(opts.n)]
            wall = statistics.median(r[0] for r in runs)
            cpu = statistics.median(r[1] for r in runs)
            done = runs[-1][2]
            ok = (
                done.returncode in (1, 2)
                and done.stderr.count("\n") == 1
                and "Traceback" not in done.stderr
                and wall <= opts.target
            )
            failures += not ok
            print(
                f"{'ok ' if ok else 'BAD'} {label:34} exit {done.returncode}  wall {wall:5.2f} s  "
                f"cpu {cpu:5.2f} s  {done.stderr.strip()[:90]}"
            )
    print(f"{failures} case(s) outside the contract or the {opts.target} s target")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
