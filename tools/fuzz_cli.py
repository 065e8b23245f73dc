"""Fuzz the tpcalc command line the way a new user (or a hostile file) would, and classify runs.

One generator, two runners:
  - this script runs N generated invocations out of process, in parallel, each with a timeout and
    a memory cap, and prints counts per class with samples of each failure;
  - ``tests/test_fuzz_cli.py`` drives the same generator in-process through hypothesis with a
    bounded example count and asserts the contract on every run.

The contract (design.md "CLI contract"; issues 8 §5 and 12 §4): exit 0, 1 (inputs' content) or
2 (usage), 3 only for an internal error; never a traceback or a hang; an error is exactly one
stderr line; ``--format json`` stdout parses as strict JSON (no NaN/Infinity); ``--format csv``
stdout is rectangular.

Usage: python tools/fuzz_cli.py [-n 10000] [-j 2] [--timeout 10] [--seed 0] [--samples 3]
Exit status: 0 when every failure class is empty, 1 otherwise.
"""

from __future__ import annotations

import argparse
import collections
import csv
import io
import json
import os
import random
import resource
import shlex
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
CONFIGS = REPO / "configs"
HF_FIXTURES = REPO / "tests" / "fixtures" / "hf"

# --- the classes ----------------------------------------------------------------------------
OK = "ok"
CLEAN_ERROR = "clean error"
TRACEBACK = "traceback"
HANG = "hang"
INVALID_JSON = "invalid json"
BAD_CSV = "non-rectangular csv"
MULTI_LINE = "multi-line error"
INTERNAL = "internal error (exit 3)"
BAD_EXIT = "unexpected exit code"
FAILURES = (TRACEBACK, HANG, INVALID_JSON, BAD_CSV, MULTI_LINE, INTERNAL, BAD_EXIT)
CLASSES = (OK, CLEAN_ERROR, *FAILURES)

# --- what gets generated ---------------------------------------------------------------------
BUILTIN_MODELS = (
    "qwen3.8", "llama3-8b", "llama3-70b", "llama3-405b", "deepseek-v3", "mixtral-8x7b",
    "nemotron4-15b", "megatron-gpt-1.7b",
)  # fmt: skip
BUILTIN_HARDWARE = ("h100-sxm", "h800", "a100-80g", "b200", "h200")
FORMATS = ("table", "json", "csv")
DTYPES = ("bf16", "fp16", "fp32", "fp8")

# Values a user would plausibly type, per option (anything not listed takes a small integer).
VALID: dict[str, tuple[str, ...]] = {
    "--tp": ("1", "2", "4", "8", "1,2,4,8", "16", "3"),
    "--seq": ("1024", "2048", "4096", "8192", "32768", "131072"),
    "--micro-batch": ("1", "2", "4"),
    "--dp": ("1", "2", "8", "8,64", "128"),
    "--zero": ("0", "1", "2", "3"),
    "--pp": ("1", "2", "4", "8", "16"),
    "--cp": ("1", "2", "4", "8"),
    "--ep": ("1", "8", "16", "64"),
    "--etp": ("1", "2", "4"),
    "--vpp": ("1", "2", "4"),
    "--microbatches": ("1", "8", "16", "32"),
    "--world-size": ("8", "64", "1024", "16384"),
    "--gpus-per-node": ("4", "8", "16"),
    "--chunks": ("2", "4", "16"),
    "--bucket-mib": ("25", "100"),
    "--cards": ("1", "2", "4"),
    "--intermediate": ("8", "16", "32"),
    "--vocab-pad-multiple": ("64", "128"),
    "--grad-dtype": DTYPES,
    "--combine-dtype": DTYPES,
    "--routing": ("node-limited", "uniform"),
    "--example": ("seed003",),
    "--id": ("q-grad-bf16", "q-dp-ring-8"),
    # tpcalc plan: small jobs, so a generated search stays cheap (issue 11: bounded fuzz cost)
    "--gpus": ("1", "8", "16"),
    "--global-batch": ("8", "16", "64"),
    "--global-batch-tokens": ("32768", "65536"),
    "--top": ("1", "3", "10"),
    "--memory-headroom": ("0", "0.1"),
    "--reserve-gb": ("0", "2"),
    "--target-step-time": ("0.5", "5"),
    "--recompute": ("none", "selective", "full", "selective,full"),
    "--schedule": ("1f1b", "interleaved", "1f1b,interleaved"),
    "--recompute-modules": ("none", "core_attn", "layernorm,moe_act"),
}
# Commands whose cost grows with the model: fuzzed on the smaller built-ins only.
MODELS_BY_COMMAND = {"plan": ("qwen3.8", "llama3-8b")}
# Options left out per command: `plan --all` prices every feasible layout (thousands), which is
# a benchmark, not a contract check.
SKIP_OPTIONS = {"plan": ("--all",)}
SEEDS_BY_COMMAND = {"figures": ("000", "003"), "verify": ("0", "7", "42")}

HUGE_INT = "9" * 300
HOSTILE_NUMBERS = (
    "0",
    "-1",
    "-8",
    HUGE_INT,
    f"-{HUGE_INT}",
    str(2**64),
    str(2**63 - 1),
    str(2**31),
    "1000000001",
    "1e309",
    "1e3",
    "1.5",
    "nan",
    "NaN",
    "inf",
    "-inf",
    "Infinity",
    "0x10",
    "1_000",
)
HOSTILE_STRINGS = (
    "",
    " ",
    "a" * 300,
    "x/" * 200 + "config.json",
    "abc",
    "1,,2",
    "1,2,x",
    ",",
    "-1,2",
    "8,0",
    "小明把苹果给了小王",
    "--format",
    "☃" * 50,
    "../../../../etc/passwd",
    "~",
)


@dataclass(frozen=True)
class Param:
    """One option of a command, as the typer app declares it."""

    opts: tuple[str, ...]  # ('--tp', '-t')
    secondary: tuple[str, ...]  # ('--no-sp',) for a --sp/--no-sp flag
    is_flag: bool
    choices: tuple[str, ...]  # enum values, or () for free text/numbers
    argument: bool  # a positional argument (show MODEL)

    @property
    def name(self) -> str:
        return next((o for o in self.opts if o.startswith("--")), self.opts[0])


def introspect() -> dict[str, list[Param]]:
    """Every command of the real app and its parameters: new commands are fuzzed for free."""
    from enum import Enum

    import typer

    from tpcalc.cli import build_app

    group = typer.main.get_command(build_app())
    commands: dict[str, list[Param]] = {}
    for name, command in group.commands.items():
        params = []
        for p in command.params:
            default = p.default
            choices: tuple[str, ...] = ()
            if isinstance(default, Enum):
                choices = tuple(str(m.value) for m in type(default))
            argument = p.param_type_name == "argument"
            params.append(
                Param(
                    tuple(p.opts),
                    tuple(getattr(p, "secondary_opts", ()) or ()),
                    bool(getattr(p, "is_flag", False)) and not argument,
                    choices,
                    argument,
                )
            )
        commands[name] = params
    return commands


# --- hostile files ---------------------------------------------------------------------------
def _yaml_dump(data: object) -> str:
    import yaml

    return yaml.safe_dump(data, sort_keys=False)


def _load_yaml(path: Path) -> dict:
    import yaml

    return yaml.safe_load(path.read_text())


@dataclass
class Corpus:
    """Files made once per run: devices, odd file kinds, broken and hostile configs."""

    root: Path
    static: list[str] = field(default_factory=list)  # paths that are safe in-process
    blocking: list[str] = field(default_factory=list)  # may hang or eat memory: out of process
    models: list[dict] = field(default_factory=list)  # valid model configs to mutate
    hf: list[dict] = field(default_factory=list)  # valid HF config.json to mutate
    hardware: list[dict] = field(default_factory=list)


def make_corpus(root: Path, *, in_process: bool = False, huge_mb: int = 25) -> Corpus:
    """Write the static hostile files under ``root``. ``in_process`` leaves out what only a
    subprocess with a timeout can survive (devices, FIFOs, a huge YAML)."""
    c = Corpus(root)
    c.models = [_load_yaml(p) for p in sorted((CONFIGS / "models").glob("*.yaml"))]
    c.hardware = [_load_yaml(p) for p in sorted((CONFIGS / "hardware").glob("*.yaml"))]
    c.hf = [json.loads(p.read_text()) for p in sorted(HF_FIXTURES.glob("*.json"))]

    def write(name: str, data: str | bytes) -> str:
        path = root / name
        if isinstance(data, bytes):
            path.write_bytes(data)
        else:
            path.write_text(data)
        return str(path)

    s = c.static
    s.append(str(root))  # a directory without config.json
    s.append(str(root / "does-not-exist.yaml"))
    s.append(write("empty.yaml", ""))
    s.append(write("null.yaml", "null\n"))
    s.append(write("list.yaml", "- 1\n- 2\n"))
    s.append(write("scalar.json", "42"))
    s.append(write("not-utf8.yaml", b"hidden_size: \xff\xfe\x80\n\x00\x9c"))
    s.append(write("not-utf8.json", b'{"hidden_size": "\xff\xfe"}'))
    s.append(write("broken.json", '{"hidden_size": 4096,'))
    s.append(write("broken.yaml", "hidden_size: [4096\n  bad: : :\n"))
    s.append(write("tabs.yaml", "hidden_size:\t4096\n\tnum_hidden_layers: 2\n"))
    s.append(write("deep.json", "[" * 100_000 + "]" * 100_000))
    s.append(write("deep-object.json", '{"a":' * 50_000 + "1" + "}" * 50_000))
    s.append(write("deep.yaml", "a: " + "[" * 5_000 + "]" * 5_000 + "\n"))
    s.append(write("long-list.yaml", "layer_types: [" + ", ".join(["full"] * 200_000) + "]\n"))
    s.append(write("digits.json", '{"hidden_size": ' + HUGE_INT + "}"))
    s.append(write("digits.yaml", f"hidden_size: {HUGE_INT}\nnum_hidden_layers: {HUGE_INT}\n"))
    laughs = "a: &a [x, x, x, x, x, x, x, x, x]\n" + "".join(
        f"{chr(98 + i)}: &{chr(98 + i)} [*{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}, "
        f"*{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}]\n"
        for i in range(8)
    )
    s.append(write("laughs.yaml", laughs))
    s.append(write("python-tag.yaml", "!!python/object/apply:os.system ['echo pwned']\n"))
    hf_dir = root / "hf-model-dir"
    hf_dir.mkdir(exist_ok=True)
    (hf_dir / "config.json").write_text(json.dumps(c.hf[0]))
    s.append(str(hf_dir))
    if not in_process:
        b = c.blocking
        b.extend(["/dev/zero", "/dev/urandom", "/dev/null", "/dev/stdin", "/proc/self/mem"])
        fifo = root / "fifo.yaml"
        if not fifo.exists():
            os.mkfifo(fifo)
        b.append(str(fifo))
        line = "# " + "x" * 1000 + "\n"
        b.append(write("huge.yaml", "hidden_size: 4096\n" + line * (huge_mb * 1000)))
    return c


def _hostile_value(rng: random.Random) -> object:
    return rng.choice(
        [
            0,
            -1,
            -4096,
            10**300,
            2**64,
            2**63,
            10**12,
            1e308,
            float("nan"),
            float("inf"),
            -float("inf"),
            0.5,
            1.5,
            "",
            "abc",
            "4096",
            None,
            True,
            [],
            [1, 2],
            {"a": 1},
            {"nested": {"deeper": [1, {"x": None}]}},
            "x" * 10_000,
            8,
            64,
            1,
        ]
    )


def mutate_config(rng: random.Random, base: dict) -> dict:
    """A copy of a valid config with 1-3 fields replaced by hostile values (nested too)."""
    data = json.loads(json.dumps(base))
    for _ in range(rng.randint(1, 3)):
        target = data
        if isinstance(data.get("tpcalc"), dict) and rng.random() < 0.2:
            target = data["tpcalc"]
        keys = [k for k in target if k != "name"] or ["hidden_size"]
        key = rng.choice(keys)
        if isinstance(target.get(key), dict) and "value" in target[key] and rng.random() < 0.8:
            target[key]["value"] = _hostile_value(rng)  # a hardware number
        elif rng.random() < 0.1:
            target.pop(key, None)
        else:
            target[key] = _hostile_value(rng)
    if rng.random() < 0.1:
        data[rng.choice(["unknown_field", "hidden_sise", "tpcalc_extra"])] = 1
    return data


def geometry_config(rng: random.Random, base: dict) -> dict:
    """Sizes that are each plausible but inconsistent or absurd together (issue 13 §2)."""
    data = json.loads(json.dumps(base))
    data.pop("head_dim", None) if rng.random() < 0.5 else None
    for key in rng.sample(
        [
            "hidden_size",
            "num_attention_heads",
            "num_key_value_heads",
            "num_hidden_layers",
            "intermediate_size",
            "vocab_size",
            "moe_intermediate_size",
            "n_routed_experts",
            "num_experts_per_tok",
        ],
        k=rng.randint(1, 3),
    ):
        data[key] = rng.choice([1, 3, 7, 8, 64, 10**9, 2**31, 2**64, 10**18, 1_000_000_001])
    return data


@dataclass
class Case:
    argv: list[str]
    files: dict[str, str | bytes] = field(default_factory=dict)  # path -> content, written first

    @property
    def fmt(self) -> str:
        fmt = "table"
        for i, a in enumerate(self.argv[:-1]):
            if a in ("--format", "-f"):
                fmt = self.argv[i + 1]
        return fmt

    def shell(self) -> str:
        shown = [a if len(a) <= 80 else f"{a[:20]}...({len(a)} chars)" for a in self.argv]
        return "tpcalc " + shlex.join(shown)


class Generator:
    """Random invocations of every command: mostly valid, a share hostile, some hostile files."""

    def __init__(self, corpus: Corpus, commands: dict[str, list[Param]] | None = None):
        self.corpus = corpus
        self.commands = commands if commands is not None else introspect()
        self.names = sorted(self.commands)

    def _config_file(self, rng: random.Random, case_dir: Path, kind: str, files: dict) -> str:
        c = self.corpus
        roll = rng.random()
        if roll < 0.3:
            pool = c.static + (c.blocking if rng.random() < 0.15 else [])
            return rng.choice(pool)
        if kind == "hardware":
            data = mutate_config(rng, rng.choice(c.hardware))
        elif roll < 0.55:
            data = geometry_config(rng, rng.choice(c.hf + c.models))
        else:
            data = mutate_config(rng, rng.choice(c.hf + c.models))
        as_json = rng.random() < 0.5
        path = case_dir / f"{kind}-{rng.randrange(10**9)}.{'json' if as_json else 'yaml'}"
        text = json.dumps(data) if as_json else _yaml_dump(data)
        files[str(path)] = text
        return str(path)

    def value(self, rng: random.Random, command: str, p: Param, hostile: bool) -> str:
        name = p.name
        if hostile:
            pool = HOSTILE_NUMBERS if rng.random() < 0.6 else HOSTILE_STRINGS
            return rng.choice(pool)
        if p.choices:
            return rng.choice(p.choices)
        if name == "--seed":
            return rng.choice(SEEDS_BY_COMMAND.get(command, ("0",)))
        return rng.choice(VALID.get(name, ("1", "2", "8")))

    def case(self, rng: random.Random, case_dir: Path) -> Case:
        command = rng.choice(self.names)
        params = self.commands[command]
        files: dict[str, str | bytes] = {}
        hostility = rng.choice([0.0, 0.0, 0.1, 0.3, 1.0])
        argv = [command]
        for p in params:
            if p.argument:  # show MODEL
                if rng.random() < 0.5:
                    argv.append(rng.choice(BUILTIN_MODELS))
                else:
                    argv.append(self._config_file(rng, case_dir, "model", files))
                continue
            if rng.random() > 0.45 and p.name not in ("--format",):
                continue
            if p.name in SKIP_OPTIONS.get(command, ()):
                continue
            if p.is_flag:
                argv.append(rng.choice([*p.opts[:1], *p.secondary]) if p.secondary else p.name)
                continue
            hostile = rng.random() < hostility
            if p.name in ("--model", "--hardware"):
                models = MODELS_BY_COMMAND.get(command, BUILTIN_MODELS)
                builtins = models if p.name == "--model" else BUILTIN_HARDWARE
                kind = "model" if p.name == "--model" else "hardware"
                if hostile and rng.random() < 0.8:
                    value = self._config_file(rng, case_dir, kind, files)
                elif hostile:
                    value = rng.choice(HOSTILE_STRINGS)
                else:
                    value = rng.choice(builtins)
            else:
                value = self.value(rng, command, p, hostile)
            argv += [rng.choice(p.opts), value]
        if rng.random() < 0.03:
            argv.append(rng.choice(["--bogus", "extra-arg", "--tp"]))
        if rng.random() < 0.5 and command != "models" and "--format" not in argv:
            argv += ["--format", rng.choice(("json", "csv"))]
        return Case(argv, files)


# --- classification --------------------------------------------------------------------------
def _reject_constant(name: str) -> None:
    raise ValueError(f"{name} is not JSON")


def classify(code: int | None, out: str, err: str, fmt: str) -> str:
    """The contract, as one class per run (the first failure that applies)."""
    if code is None:
        return HANG
    if "Traceback (most recent call last)" in err or "Traceback (most recent call last)" in out:
        return TRACEBACK
    if code == 3:
        return INTERNAL
    if code not in (0, 1, 2):
        return BAD_EXIT
    lines = [line for line in err.splitlines() if line.strip()]
    if code != 0:
        if len(lines) != 1 or "errors.pydantic.dev" in err:
            return MULTI_LINE
        return CLEAN_ERROR
    if fmt == "json":
        try:
            json.loads(out, parse_constant=_reject_constant)
        except ValueError:
            return INVALID_JSON
    elif fmt == "csv":
        rows = list(csv.reader(io.StringIO(out)))
        if not rows or len({len(r) for r in rows}) != 1:
            return BAD_CSV
    return OK


# --- out-of-process runner -------------------------------------------------------------------
@dataclass
class Result:
    case: Case
    cls: str
    code: int | None
    err: str
    seconds: float


def _limit_memory(limit_bytes: int):
    def apply() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (limit_bytes, limit_bytes))

    return apply


def run_case(case: Case, timeout_s: float, memory_bytes: int) -> Result:
    for path, content in case.files.items():
        mode = "wb" if isinstance(content, bytes) else "w"
        with open(path, mode) as fh:
            fh.write(content)
    argv = [sys.executable, "-m", "tpcalc", *case.argv]
    env = {**os.environ, "COLUMNS": "160"}
    env.pop("TPCALC_DEBUG", None)
    start = time.perf_counter()
    try:
        done = subprocess.run(
            argv,
            capture_output=True,
            timeout=timeout_s,
            stdin=subprocess.DEVNULL,
            env=env,
            cwd=tempfile.gettempdir(),  # a relative output path (--save-svg 8) lands there
            preexec_fn=_limit_memory(memory_bytes),
        )
        code: int | None = done.returncode
        out = done.stdout.decode("utf-8", "replace")
        err = done.stderr.decode("utf-8", "replace")
    except subprocess.TimeoutExpired:
        code, out, err = None, "", ""
    finally:
        for path in case.files:
            Path(path).unlink(missing_ok=True)
    seconds = time.perf_counter() - start
    return Result(case, classify(code, out, err, case.fmt), code, err, seconds)


def _child(case: Case, out_path: str, err_path: str, memory_bytes: int) -> None:
    """In a forked child: redirect fd 1 and 2 to files, cap memory, run the console entry point."""
    code = 0
    try:
        for fd, path in ((1, out_path), (2, err_path)):
            target = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
            os.dup2(target, fd)
            os.close(target)
        stdin = os.open(os.devnull, os.O_RDONLY)
        os.dup2(stdin, 0)
        os.chdir(os.path.dirname(out_path))  # a relative output path (--save-svg 8) lands there
        resource.setrlimit(resource.RLIMIT_AS, (memory_bytes, memory_bytes))
        from tpcalc.cli import main as tpcalc_main

        tpcalc_main(list(case.argv))
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    except BaseException:  # what would have reached the interpreter: a traceback, exit 1
        import traceback

        traceback.print_exc()
        code = 1
    finally:
        try:
            sys.stdout.flush()
            sys.stderr.flush()
        finally:
            os._exit(code)


def run_forked(cases: list[Case], jobs: int, timeout_s: float, memory_bytes: int, tmp: Path):
    """Each case in its own process, forked from a parent that imported tpcalc once (so 10,000
    cases cost minutes, not an interpreter start-up each). Single-threaded parent: fork-safe."""
    import tpcalc.cli

    tpcalc.cli.build_app()  # import every command module before forking
    env_debug = os.environ.pop("TPCALC_DEBUG", None)
    os.environ["COLUMNS"] = "160"
    results: list[Result | None] = [None] * len(cases)
    running: dict[int, tuple[int, float, str, str]] = {}  # pid -> (index, start, out, err)
    queue = list(range(len(cases)))[::-1]

    def finish(pid: int, code: int | None) -> None:
        index, started, out_path, err_path = running.pop(pid)
        case = cases[index]
        out = Path(out_path).read_bytes().decode("utf-8", "replace")
        err = Path(err_path).read_bytes().decode("utf-8", "replace")
        for path in (out_path, err_path, *case.files):
            Path(path).unlink(missing_ok=True)
        seconds = time.perf_counter() - started
        results[index] = Result(case, classify(code, out, err, case.fmt), code, err, seconds)

    while queue or running:
        while queue and len(running) < jobs:
            index = queue.pop()
            case = cases[index]
            for path, content in case.files.items():
                Path(path).write_bytes(content if isinstance(content, bytes) else content.encode())
            out_path, err_path = str(tmp / f"{index}.out"), str(tmp / f"{index}.err")
            pid = os.fork()
            if pid == 0:
                _child(case, out_path, err_path, memory_bytes)
            running[pid] = (index, time.perf_counter(), out_path, err_path)
        pid, status = os.waitpid(-1, os.WNOHANG)
        if pid:
            code = os.waitstatus_to_exitcode(status)
            finish(pid, code if code >= 0 else 128 - code)  # killed by a signal: 128 + n
            continue
        now = time.perf_counter()
        for pid, (_, started, _, _) in list(running.items()):
            if now - started > timeout_s:
                os.kill(pid, 9)
                os.waitpid(pid, 0)
                finish(pid, None)
        time.sleep(0.002)
    if env_debug is not None:
        os.environ["TPCALC_DEBUG"] = env_debug
    return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("-n", "--cases", type=int, default=1000)
    parser.add_argument("-j", "--jobs", type=int, default=os.cpu_count() or 2)
    parser.add_argument("--timeout", type=float, default=10.0, help="seconds per case (a hang)")
    parser.add_argument("--memory-mib", type=int, default=2048, help="address-space cap per case")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--samples", type=int, default=3, help="samples shown per failure class")
    parser.add_argument("--huge-mb", type=int, default=25, help="size of the huge YAML")
    parser.add_argument("--log", help="write every failure as a JSON line to this file")
    parser.add_argument(
        "--spawn",
        action="store_true",
        help="start 'python -m tpcalc' per case (slower: an interpreter start-up each) instead "
        "of forking a child from a parent that imported tpcalc once",
    )
    args = parser.parse_args(argv)

    rng = random.Random(args.seed)
    memory = args.memory_mib * 2**20
    with tempfile.TemporaryDirectory(prefix="tpcalc-fuzz-") as tmp:
        root = Path(tmp)
        corpus = make_corpus(root, huge_mb=args.huge_mb)
        gen = Generator(corpus)
        case_dir = root / "cases"
        case_dir.mkdir()
        cases = [gen.case(rng, case_dir) for _ in range(args.cases)]
        start = time.perf_counter()
        if args.spawn:
            with ThreadPoolExecutor(max_workers=args.jobs) as pool:
                results = list(pool.map(lambda c: run_case(c, args.timeout, memory), cases))
        else:
            out_dir = root / "out"
            out_dir.mkdir()
            results = run_forked(cases, args.jobs, args.timeout, memory, out_dir)
        wall = time.perf_counter() - start

    counts = collections.Counter(r.cls for r in results)
    mode = "spawned" if args.spawn else "forked"
    print(f"{len(results)} cases ({mode}), {args.jobs} jobs, seed {args.seed}, {wall:.0f} s wall")
    per_command = collections.Counter(r.case.argv[0] for r in results)
    print("per command: " + ", ".join(f"{k} {v}" for k, v in sorted(per_command.items())))
    for cls in CLASSES:
        print(f"  {cls:<24} {counts.get(cls, 0):>6}")
    slowest = max((r for r in results if r.code is not None), key=lambda r: r.seconds)
    print(f"slowest completed case: {slowest.seconds:.1f} s  {slowest.case.shell()}")
    for cls in FAILURES:
        failed = [r for r in results if r.cls == cls]
        if not failed:
            continue
        print(f"\n== {cls}: {len(failed)} (distinct last stderr lines, up to {args.samples})")
        seen: dict[str, Result] = {}
        for r in failed:
            key = (r.err.strip().splitlines() or [""])[-1][:160]
            if cls == HANG:
                key = " ".join(a for a in r.case.argv if "/" in a)[:160]
            seen.setdefault(key, r)
        for key, r in list(seen.items())[: args.samples]:
            print(f"  $ {r.case.shell()}")
            print(f"    exit {r.code}: {key}")
            for path, content in r.case.files.items():
                print(f"    (file {Path(path).name}: {str(content)[:300]!r})")
    if args.log:
        with open(args.log, "w") as fh:
            for r in results:
                if r.cls in FAILURES:
                    files = {Path(p).name: str(c)[:2000] for p, c in r.case.files.items()}
                    record = {"class": r.cls, "argv": r.case.argv, "exit": r.code}
                    fh.write(json.dumps({**record, "stderr": r.err[-2000:], "files": files}))
                    fh.write("\n")
    return 1 if any(counts.get(c) for c in FAILURES) else 0


if __name__ == "__main__":
    sys.exit(main())
