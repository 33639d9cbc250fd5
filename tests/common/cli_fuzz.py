#!/usr/bin/env python3
"""Fuzz test of the `tvlab` command: hostile values for every option of every command.

For each command (`list`, and each chapter `tvlab list --names` gives) the options are read from
its `--help`; each option is then given each hostile value of its type (0, -1, huge, overflowing,
NaN, inf, not a number, empty, unwritable paths) alone, and random combinations of several options
follow. Every run must

  - exit with status 0 (it ran) or 2 (it refused, with a reason): never 1 (an implementation
    disagreeing with the reference on inputs it accepted) and never by a signal;
  - say why on stderr when it exits 2, in at most three lines;
  - finish within --per-run seconds.

Runs are bounded by the command's own limits (--time-limit, --max-memory), so that no accepted
combination may take long; the whole test stops starting new runs after --budget seconds. The
order is a seeded shuffle, by default seeded with the date (so that each day's runs cover another
part of the list within the same budget); the seed is printed, and a failure is reproduced by
giving it with --seed.

    cli_fuzz.py path/to/tvlab [--seed N] [--budget SECONDS] [--per-run SECONDS]
"""
import argparse
import concurrent.futures
import os
import random
import re
import shlex
import subprocess
import sys
import tempfile
import time

INTS = ["0", "-1", "1", "3", "2147483647", "2147483648", "-2147483649", "9223372036854775807",
        "99999999999999999999999", "abc", "", "1e3", "nan", "0x10"]
FLOATS = ["0", "-1", "1", "1.5", "1e-320", "1e308", "1e300", "-1e300", "nan", "inf", "-inf", "abc", "", "1e999"]
TEXTS = ["", "abc", "-", "x" * 4096, "1,2", "-1", "nan", "%s%n", "../../..", "\u00e9\u00e8"]
PATHS = ["", "/proc/no_such_dir/out", "/nonexistent_dir/a/b", "/dev/null/x", "{tmp}/ok"]

# The root options, with hostile values of their own (a run also gets the limits below).
GLOBAL = {"--seed": INTS + ["18446744073709551615", "18446744073709551616"], "--threads": INTS,
          "--format": TEXTS + ["json", "markdown", "text"], "--max-memory": TEXTS + ["0", "1", "1k", "8G", "1e30T"],
          "--time-limit": FLOATS}
LIMITS = ["--time-limit", "2", "--max-memory", "2G"]
OPTION = re.compile(r"^\s+(?:-\w,)?(--[\w-]+)(?:\s+(INT|UINT|FLOAT|TEXT)(?::\{([^}]*)\})?)?")


def options_of(tvlab, command):
    """{option: kind} from `tvlab COMMAND --help`; kind is INT, FLOAT, TEXT, PATH or FLAG."""
    text = subprocess.run([tvlab, command, "--help"], capture_output=True, text=True, timeout=60).stdout
    found = {}
    for line in text.splitlines():
        m = OPTION.match(line)
        if not m or m.group(1) == "--help":
            continue
        name, kind, choices = m.group(1), m.group(2) or "FLAG", m.group(3)
        if kind == "UINT":
            kind = "INT"
        if kind == "TEXT" and (name in ("--dump", "--svg", "--hf-config") or "FILE" in line or "DIR" in line):
            kind = "PATH"
        found[name] = (kind, choices.split(",") if choices else [])
    return found


def values_of(kind, choices, tmp):
    if kind == "INT":
        return INTS
    if kind == "FLOAT":
        return FLOATS
    if kind == "PATH":
        return [p.format(tmp=tmp) for p in PATHS]
    if kind == "FLAG":
        return [None]
    return TEXTS + choices


def run(tvlab, args, per_run):
    start = time.monotonic()
    try:
        p = subprocess.run([tvlab] + args, capture_output=True, text=True, errors="replace", timeout=per_run)
    except subprocess.TimeoutExpired:
        return args, None, "", time.monotonic() - start
    return args, p.returncode, p.stderr, time.monotonic() - start


def problem(code, stderr):
    if code is None:
        return "did not finish in time"
    if code < 0:
        return f"killed by signal {-code}"
    if code not in (0, 2):
        return f"exit status {code} (expected 0 or 2)"
    lines = [l for l in stderr.splitlines() if l.strip()]
    if code == 2 and not lines:
        return "exit status 2 with nothing on stderr"
    if len(lines) > 3:
        return f"{len(lines)} lines on stderr"
    return None


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("tvlab")
    parser.add_argument("--seed", type=int, default=int(time.strftime("%Y%m%d")))
    parser.add_argument("--budget", type=float, default=30.0)
    parser.add_argument("--per-run", type=float, default=60.0)
    parser.add_argument("--combinations", type=int, default=400)
    a = parser.parse_args()
    rng = random.Random(a.seed)
    tmp = tempfile.mkdtemp(prefix="tvlab_fuzz_")
    os.chmod(tmp, 0o700)
    names = subprocess.run([a.tvlab, "list", "--names"], capture_output=True, text=True, check=True).stdout.split()
    commands = {c: options_of(a.tvlab, c) for c in ["list"] + names}

    # Each option alone with each hostile value, then random combinations of several.
    runs = []
    for command, options in commands.items():
        for name, (kind, choices) in options.items():
            for value in values_of(kind, choices, tmp):
                runs.append([command, name] + ([] if value is None else [value]))
    for name, values in GLOBAL.items():
        for value in values:
            runs.append([name, value, rng.choice(["list", rng.choice(names)])])
    rng.shuffle(runs)
    for _ in range(a.combinations):
        command = rng.choice(names)
        options = commands[command]
        args = [command]
        for name in rng.sample(sorted(options), k=min(len(options), rng.randint(2, 5))):
            value = rng.choice(values_of(*options[name], tmp))
            args += [name] + ([] if value is None else [value])
        runs.append(args)

    started = time.monotonic()
    failures, statuses = [], {}

    def record(future):
        args_done, code, stderr, seconds = future.result()
        statuses[code] = statuses.get(code, 0) + 1
        why = problem(code, stderr)
        if why:
            failures.append((args_done, why, stderr, seconds))

    with concurrent.futures.ThreadPoolExecutor(max_workers=os.cpu_count() or 2) as pool:
        pending = set()
        for args in runs:
            if time.monotonic() - started > a.budget:
                break
            # The root's limits first: a later --time-limit or --max-memory in args overrides them.
            pending.add(pool.submit(run, a.tvlab, LIMITS + args, a.per_run))
            if len(pending) >= 2 * (os.cpu_count() or 2):
                finished, pending = concurrent.futures.wait(pending, return_when=concurrent.futures.FIRST_COMPLETED)
                for f in finished:
                    record(f)
        for f in concurrent.futures.as_completed(pending):
            record(f)
    done = sum(statuses.values())

    print(f"{done} of {len(runs)} runs in {time.monotonic() - started:.0f} s (seed {a.seed}, budget {a.budget:.0f} s); "
          "exit statuses: " + ", ".join(f"{code}: {n}" for code, n in sorted(statuses.items(), key=str)))
    for args, why, stderr, seconds in failures:
        print(f"FAIL {why} ({seconds:.1f} s): tvlab {shlex.join(args)}")
        for line in stderr.splitlines()[:6]:
            print(f"     {line}")
    subprocess.run(["rm", "-rf", tmp])
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
