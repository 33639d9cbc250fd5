#!/usr/bin/env python3
"""Chapter 04's flash attention against PyTorch's CPU flash attention, side by side.

For every shape, tvlab's benchmark (bench_04_flash_attention: the forward pass's last version,
opt_v3, and the backward pass's, opt_backward_v4) and PyTorch's
torch.nn.functional.scaled_dot_product_attention on the same [1, 8, n, d] float32 inputs (which
runs ATen's CPU flash kernel) are timed one after the other, round after round, so that both see
the same machine state; each round gives a paired ratio, and the table reports the median and the
spread. Both run with the same number of threads. Not part of CI; needs PyTorch:

    bash scripts/hf_parity_env.sh      # build/hf_venv with PyTorch (and transformers)
    build/hf_venv/bin/python scripts/flash_vs_pytorch.py --bench build/default/chapters/bench_04_flash_attention

The ratio is PyTorch's time over tvlab's: above 1, tvlab is faster. GFLOP/s counts 4 h n^2 d for
the forward pass (halved when causal) and 2.5 times that for the backward pass, as the benchmark
does. The backward pass is timed alone in both: tvlab's from the forward pass's saved output and
log-sum-exp, PyTorch's as torch.autograd.grad of a graph built once (ATen saves the same).
"""

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time

HEADS = 8


def flops(n, d, causal, backward):
    f = 4.0 * HEADS * n * n * d / (2.0 if causal else 1.0)
    return 2.5 * f if backward else f


def tvlab_name(n, d, causal, backward):
    if backward:
        return f"opt_backward_v4_flash_backward/n:{n}/d:{d}/causal:{int(causal)}/real_time"
    return f"opt_v3_flash_forward/n:{n}/d:{d}/causal:{int(causal)}/real_time"


def run_tvlab(bench, names, min_time, threads):
    """Seconds per call of each benchmark name, from one run of the benchmark program."""
    pattern = "^(" + "|".join(name.replace("/real_time", "") for name in names) + ")(/real_time)?$"
    env = dict(os.environ, OMP_NUM_THREADS=str(threads))
    out = subprocess.run([bench, f"--benchmark_filter={pattern}", "--benchmark_format=json",
                          f"--benchmark_min_time={min_time}"], env=env, capture_output=True, text=True, check=True)
    data = json.loads(out.stdout)
    times = {}
    for b in data["benchmarks"]:
        if b.get("error_occurred"):
            raise SystemExit(f"flash_vs_pytorch.py: {b['name']}: {b.get('error_message')}")
        unit = {"ns": 1e-9, "us": 1e-6, "ms": 1e-3, "s": 1.0}[b["time_unit"]]
        times[b["name"]] = b["real_time"] * unit
    missing = [n for n in names if n not in times]
    if missing:
        raise SystemExit(f"flash_vs_pytorch.py: {bench} does not register {missing[0]} (rebuild it)")
    return times, out.stderr


def time_call(call, min_time):
    """Seconds per call: repeated until min_time has passed, after one warm-up call."""
    call()
    calls, start = 0, time.perf_counter()
    while True:
        call()
        calls += 1
        elapsed = time.perf_counter() - start
        if elapsed >= min_time:
            return elapsed / calls


def run_torch(torch, n, d, causal, backward, min_time):
    F = torch.nn.functional
    g = torch.Generator().manual_seed(n * 7 + d)
    q, k, v = (torch.randn(1, HEADS, n, d, generator=g, dtype=torch.float32) for _ in range(3))
    if not backward:
        with torch.no_grad():
            return time_call(lambda: F.scaled_dot_product_attention(q, k, v, is_causal=causal), min_time)
    q, k, v = (t.requires_grad_() for t in (q, k, v))
    out = F.scaled_dot_product_attention(q, k, v, is_causal=causal)
    dout = torch.randn(out.shape, generator=g, dtype=torch.float32)
    return time_call(lambda: torch.autograd.grad(out, (q, k, v), dout, retain_graph=True), min_time)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--bench", required=True, help="path to bench_04_flash_attention")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--min-time", type=float, default=0.3, help="seconds each measurement runs at least")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--n", type=int, nargs="+", default=[512, 1024, 2048, 4096, 8192, 16384])
    parser.add_argument("--d", type=int, nargs="+", default=[64, 128])
    parser.add_argument("--backward-max-n", type=int, default=4096, help="the largest n of the backward pass")
    args = parser.parse_args()
    try:
        import torch
    except ImportError:
        raise SystemExit("flash_vs_pytorch.py: PyTorch is not installed here: run it with build/hf_venv/bin/python "
                         "(made by scripts/hf_parity_env.sh)")
    torch.set_num_threads(args.threads)
    shapes = [(n, d, c, b) for b in (False, True) for n in args.n for d in args.d for c in (False, True)
              if not b or n <= args.backward_max_n]
    sgemm = "openblas_sgemm/1024/real_time"  # the machine's matrix-product rate, in the same run
    names = [tvlab_name(*s) for s in shapes] + [sgemm]
    ratios = {s: [] for s in shapes}
    best = {s: [float("inf"), float("inf")] for s in shapes}
    blas_note = ""
    sgemm_best = float("inf")
    for r in range(args.rounds):
        # tvlab, then PyTorch, shape by shape within the round (the benchmark program runs its shapes in one go)
        tv, stderr = run_tvlab(args.bench, names, args.min_time, args.threads)
        blas_note = blas_note or " ".join(line.strip() for line in stderr.splitlines() if "OpenBLAS" in line)
        sgemm_best = min(sgemm_best, tv[sgemm])
        for s in shapes:
            t_torch = run_torch(torch, *s, args.min_time)
            t_tvlab = tv[tvlab_name(*s)]
            ratios[s].append(t_torch / t_tvlab)
            best[s] = [min(best[s][0], t_tvlab), min(best[s][1], t_torch)]
        print(f"round {r + 1} of {args.rounds} done", file=sys.stderr)

    print(f"tvlab {os.path.basename(args.bench)} against PyTorch {torch.__version__} "
          f"(CPU capability {torch.backends.cpu.get_cpu_capability()}), {args.threads} threads, "
          f"{platform.processor() or platform.machine()}; {args.rounds} paired rounds")
    if blas_note:
        print(f"OpenBLAS: {blas_note}")
    sgemm_rate = 2.0 * 1024**3 / sgemm_best / 1e9
    print(f"OpenBLAS SGEMM 1024^3 in the same runs: {sgemm_rate:.1f} GFLOP/s")
    config = torch.__config__.show().replace(",", " ").split()
    blas = [item for item in config if item.startswith(("BLAS_INFO=", "USE_MKLDNN=", "USE_OPENMP="))]
    if blas:
        print("PyTorch build: " + ", ".join(blas))
    print()
    print("| pass | n | d | causal | tvlab GFLOP/s | of SGEMM | PyTorch GFLOP/s | PyTorch time / tvlab time, median | min | max |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for s in shapes:
        n, d, causal, backward = s
        f = flops(*s)
        rs = ratios[s]
        print(f"| {'backward' if backward else 'forward'} | {n} | {d} | {'yes' if causal else 'no'} | "
              f"{f / best[s][0] / 1e9:.1f} | {100 * f / best[s][0] / 1e9 / sgemm_rate:.0f}% | {f / best[s][1] / 1e9:.1f} | "
              f"{statistics.median(rs):.2f} | "
              f"{min(rs):.2f} | {max(rs):.2f} |")


if __name__ == "__main__":
    main()
