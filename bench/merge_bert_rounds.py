#!/usr/bin/env python3
"""Merges the rounds of bench/run_bert_bench into one side-by-side table.

Each round wrote the peers' figures (bench/peers/bert_peers.py --out peers_<r>.json) and stile's
(bench_bert --out stile_<r>.json); both list results as {engine, threads, seq_len, median_ms}.
A cell's figure is the median over rounds of the per-round medians, so a slow spell of the
machine in one round (its speed drifts by tens of percent from minute to minute) moves neither
stile's nor a peer's figure much, and both saw the same spells. Standard library only.

Ratios compare like with like, as bench_bert's own table does: an int8 peer against stile's
int8 engine ("stile-int8") when the files have it, every other peer against "stile" (fp32).

  bench/merge_bert_rounds.py [--out merged.json] FILE.json...
"""
import argparse
import json
import statistics
import sys


def stile_engine_for(peer, engines):
    """The stile engine a peer is compared with: its number format (bench_bert's matching_precision)."""
    if "int8" in peer and "stile-int8" in engines:
        return "stile-int8"
    return "stile"


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("files", nargs="+", help="per-round JSON files (peers and stile, any order)")
    ap.add_argument("--out", help="write the merged figures as JSON")
    args = ap.parse_args()

    cells = {}  # (engine, threads, seq_len) -> [per-round median ms]
    loads = []
    for path in args.files:
        with open(path) as f:
            j = json.load(f)
        for r in j.get("results", []):
            cells.setdefault((r["engine"], int(r["threads"]), int(r["seq_len"])), []).append(float(r["median_ms"]))
        m = j.get("machine")
        if isinstance(m, dict) and m.get("loadavg_before") is not None:
            loads.append((path, m.get("loadavg_before"), m.get("loadavg_after")))
    if not cells:
        sys.exit("merge_bert_rounds: no results in " + " ".join(args.files))
    merged = {k: statistics.median(v) for k, v in cells.items()}

    engines = []  # stile's first, then in order of appearance
    for e, _, _ in cells:
        if e not in engines:
            engines.append(e)
    engines.sort(key=lambda e: not e.startswith("stile"))  # stable: keeps the order within each group
    rounds = max(len(v) for v in cells.values())
    print(f"batch 1, ms: median over {rounds} rounds of each round's median (min-max over rounds); "
          f"ratio = stile in the peer's format (stile-int8 for int8 peers when run, else stile) / peer "
          f"(lower is better for stile)")
    for t in sorted({k[1] for k in cells}):
        lengths = sorted({k[2] for k in cells if k[1] == t})
        cols = [e for e in engines if any((e, t, L) in cells for L in lengths)]
        print(f"\nthreads {t}")
        header = f"{'L':>5}"
        for e in cols:
            header += f" | {e:>23}" + ("" if e.startswith("stile") else f" {'ratio':>6}")
        print(header)
        for L in lengths:
            line = f"{L:>5}"
            for e in cols:
                v = cells.get((e, t, L))
                if v is None:
                    line += f" | {'-':>23}" + ("" if e.startswith("stile") else f" {'-':>6}")
                    continue
                cell = f"{merged[(e, t, L)]:.2f} ({min(v):.2f}-{max(v):.2f})"
                line += f" | {cell:>23}"
                ref = merged.get((stile_engine_for(e, engines), t, L))
                if not e.startswith("stile"):
                    line += f" {ref / merged[(e, t, L)]:>6.2f}" if ref is not None else f" {'-':>6}"
            print(line)
    short = [k for k, v in cells.items() if len(v) < rounds]
    if short:
        print(f"\nnote: {len(short)} cells have fewer than {rounds} rounds, e.g. {short[0]}")
    for path, before, after in loads:
        print(f"load average {path}: before {before}, after {after}")

    if args.out:
        out = {"schema": "stile-bert-rounds 1", "rounds": rounds, "files": args.files,
               "statistic": "median over rounds of the per-round medians",
               "results": [{"engine": e, "threads": t, "seq_len": L, "median_ms": merged[(e, t, L)],
                            "round_medians_ms": cells[(e, t, L)]} for (e, t, L) in sorted(cells)]}
        with open(args.out, "w") as f:
            json.dump(out, f, indent=1)
            f.write("\n")
        print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
