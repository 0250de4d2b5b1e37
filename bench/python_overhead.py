"""What Python adds to one encode call: stile.SentenceEncoder.encode of one 16-token sentence against
the same model's C++ embed of it timed inside the module (no Python in its time), in pairs (each
encode right after a C++ call); the overhead is the median of the pairs' differences. Also the time
each encode call spends outside its own C++ compute (the module times that part of the call), and
a warm call with nothing to compute.

    build/pyenv/bin/python bench/python_overhead.py [--calls 2000] [--blocks 5] [--threads 1]
"""
import argparse
import json
import os
import statistics
import time

from machine import cpu_name  # bench/machine.py

import stile


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--calls", type=int, default=2000, help="pairs per block")
    ap.add_argument("--blocks", type=int, default=5, help="blocks (progress is shown after each)")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--model", default=None, help="a sentence-transformers directory (default: the default model)")
    ap.add_argument("--json", default=None, help="also write the figures here")
    args = ap.parse_args()
    model = stile.SentenceEncoder(args.model, threads=args.threads)
    text = "a charming and often affecting journey through the lives of two old friends ."
    tokens = len(model.tokenize(text)[0]["input_ids"])
    model.encode(text)  # warm-up
    # Paired: each Python call right after a C++ call, so both see the same machine state (clock,
    # caches, neighbours); the overhead is the median of the pairs' differences.
    # Outside: the Python call's time less the time the module spent in C++ within it (measured
    # in the same call, so the compute's own variation cancels).
    cpp, py, diff, outside = [], [], [], []
    for block in range(args.blocks):
        for _ in range(args.calls):
            c = model._model.embed_call_seconds(text, 1)[0]
            t0 = time.perf_counter()
            model.encode(text)
            p = time.perf_counter() - t0
            cpp.append(c)
            py.append(p)
            diff.append(p - c)
            outside.append(p - model._model.last_embed_seconds)
        print(f"block {block + 1}/{args.blocks}", flush=True)
    # The call machinery alone, warm: calls with nothing to compute.
    def warm_us(call, n=20000):
        times = []
        for _ in range(n):
            t0 = time.perf_counter()
            call()
            times.append(time.perf_counter() - t0)
        return statistics.median(times) * 1e6

    empty_encode = warm_us(lambda: model.encode([]))
    empty_binding = warm_us(lambda: model._model.embed([], None, None))
    c, p, d = statistics.median(cpp), statistics.median(py), statistics.median(diff)
    q1, _, q3 = statistics.quantiles(diff, n=4)
    o = statistics.median(outside)
    out = {"cpu": cpu_name(), "model": os.path.basename(os.path.normpath(args.model or stile.default_model_dir())),
           "threads": args.threads, "tokens": tokens, "calls": len(py),
           "cpp_median_us": c * 1e6, "python_median_us": p * 1e6, "overhead_us": d * 1e6,
           "overhead_quartiles_us": [q1 * 1e6, q3 * 1e6], "overhead_fraction": d / c,
           "outside_cpp_median_us": o * 1e6, "empty_encode_us": empty_encode, "empty_binding_us": empty_binding}
    print(f"{out['cpu']}, {out['model']}, {args.threads} thread(s), one {tokens}-token sentence, {len(py)} pairs:")
    print(f"  C++ embed          {c * 1e6:9.1f} us (median)")
    print(f"  Python encode      {p * 1e6:9.1f} us (median)")
    print(f"  Python's overhead  {d * 1e6:9.1f} us (median of the pairs; quartiles {q1 * 1e6:.1f} .. {q3 * 1e6:.1f}), "
          f"{100 * d / c:.1f}% of the call")
    print(f"  outside C++ compute{o * 1e6:9.1f} us (median: the encode call's time less its own C++ embed's)")
    print(f"  nothing to compute {empty_encode:9.1f} us encode([]), {empty_binding:.1f} us the binding's embed([]) (warm)")
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(out, f, indent=1)


if __name__ == "__main__":
    main()
