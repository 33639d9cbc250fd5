#!/usr/bin/env python3
"""Runs a Google Benchmark binary several times and reports medians and paired ratios.

On a shared machine the memory bandwidth can change by half from one minute to the next, so a
figure measured alone says little, and two figures measured minutes apart compare badly. This
script runs the selected benchmarks together, `--rounds` times (each round one process running
every selected benchmark once, in the binary's order), and reports for each benchmark the median
time over the rounds, and for each `--ratio A B` the median, the smallest and the largest of the
per-round ratios time(A) / time(B), and for each `--rate-ratio A B` those of the bytes per second
the two report (GB/s of A against GB/s of B, for example a decode step's reading of its cache
against a copy's): both figures of a ratio come from the same round, a few seconds apart.

    python3 scripts/bench_paired.py build/default/chapters/bench_05_kv_cache \\
        --filter 'stream_scale|gqa_decode_best/g:(32|8)/length:32768' --rounds 7 \\
        --ratio 'gqa_decode_best/g:32/length:32768' 'gqa_decode_best/g:8/length:32768'

Names are the benchmark names without the `/real_time` suffix. `--markdown` prints the tables in
Markdown. Exit status 2 if a named benchmark of a ratio did not run or reported an error.
"""

import argparse
import json
import statistics
import subprocess
import sys


def run_round(binary, bench_filter, min_time):
    """One process running every selected benchmark once: {name: (seconds, counters)}."""
    command = [binary, f"--benchmark_filter={bench_filter}", f"--benchmark_min_time={min_time}",
               "--benchmark_format=json"]
    completed = subprocess.run(command, check=True, capture_output=True, text=True)
    report = json.loads(completed.stdout)
    results = {}
    for bench in report["benchmarks"]:
        name = bench["name"].removesuffix("/real_time")
        if bench.get("error_occurred"):
            results[name] = (None, {"error": bench.get("error_message", "")})
            continue
        scale = {"ns": 1e-9, "us": 1e-6, "ms": 1e-3, "s": 1.0}[bench["time_unit"]]
        counters = {key: value for key, value in bench.items() if isinstance(value, (int, float))}
        results[name] = (bench["real_time"] * scale, counters)
    return results


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("binary")
    parser.add_argument("--filter", required=True, help="--benchmark_filter of the binary")
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--min-time", default="0.3", help="--benchmark_min_time of each round (seconds)")
    parser.add_argument("--ratio", nargs=2, action="append", default=[], metavar=("A", "B"),
                        help="report time(A) / time(B) per round")
    parser.add_argument("--rate-ratio", nargs=2, action="append", default=[], metavar=("A", "B"),
                        help="report bytes_per_second(A) / bytes_per_second(B) per round")
    parser.add_argument("--markdown", action="store_true")
    args = parser.parse_args()
    if args.rounds < 1:
        parser.error("--rounds must be at least 1")

    rounds = [run_round(args.binary, args.filter, args.min_time) for _ in range(args.rounds)]
    names = list(rounds[0].keys())

    bar = "| " if args.markdown else ""
    sep = " | " if args.markdown else "  "
    print(f"{bar}benchmark{sep}median time{sep}median GB/s{sep}rounds{' |' if args.markdown else ''}")
    if args.markdown:
        print("| --- | --- | --- | --- |")
    for name in names:
        times = [r[name][0] for r in rounds if name in r and r[name][0] is not None]
        if not times:
            print(f"{bar}{name}{sep}error: {rounds[0][name][1].get('error', '')}{sep}{sep}{' |' if args.markdown else ''}")
            continue
        rates = [r[name][1]["bytes_per_second"] for r in rounds if name in r and "bytes_per_second" in r[name][1]]
        rate = f"{statistics.median(rates) / 1e9:.1f}" if rates else "-"
        print(f"{bar}{name}{sep}{statistics.median(times) * 1e3:.3g} ms{sep}{rate}{sep}{len(times)}"
              f"{' |' if args.markdown else ''}")

    status = 0
    pairs = [(a, b, "time") for a, b in args.ratio] + [(a, b, "rate") for a, b in args.rate_ratio]
    if pairs:
        print()
        print(f"{bar}ratio{sep}median{sep}min{sep}max{' |' if args.markdown else ''}")
        if args.markdown:
            print("| --- | --- | --- | --- |")
    for a, b, kind in pairs:
        ratios = []
        for r in rounds:
            if a not in r or b not in r or r[a][0] is None or r[b][0] is None:
                continue
            if kind == "time":
                ratios.append(r[a][0] / r[b][0])
            elif "bytes_per_second" in r[a][1] and "bytes_per_second" in r[b][1]:
                ratios.append(r[a][1]["bytes_per_second"] / r[b][1]["bytes_per_second"])
        if not ratios:
            print(f"{a} / {b}: no round measured both", file=sys.stderr)
            status = 2
            continue
        label = f"{a} / {b}" if kind == "time" else f"GB/s of {a} / GB/s of {b}"
        print(f"{bar}{label}{sep}{statistics.median(ratios):.3f}{sep}{min(ratios):.3f}{sep}{max(ratios):.3f}"
              f"{' |' if args.markdown else ''}")
    return status


if __name__ == "__main__":
    sys.exit(main())
