#!/usr/bin/env python3
"""Draws a stile request timeline (the Chrome trace JSON that `run --trace` and
`bench_pipeline --trace` write) as an SVG picture: one lane for IO (read, then checksum/verify),
one for compute (and the stalls where compute waited for IO), one block per layer.
Plain Python, no plotting library needed.

    scripts/plot_timeline.py trace.json docs/pipeline_timeline.svg [--title "..."]
"""
import argparse
import json
import sys

COLORS = {"read": "#4e79a7", "verify": "#a0cbe8", "compute": "#f28e2b", "stall": "#e15759",
          "embeddings": "#59a14f"}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("trace")
    ap.add_argument("out")
    ap.add_argument("--title", default=None)
    args = ap.parse_args()
    try:
        with open(args.trace, encoding="utf-8") as f:
            trace = json.load(f)
        events = [e for e in trace["traceEvents"] if e.get("ph") == "X"]
    except (OSError, ValueError, KeyError, TypeError) as e:
        sys.exit(f"plot_timeline: {args.trace}: not a stile Chrome trace ({e})")
    if not events:
        sys.exit(f"plot_timeline: {args.trace}: no events")
    other = trace.get("otherData", {})
    end_us = max(e["ts"] + e["dur"] for e in events)
    width, left, right, lane_h, top = 1000, 90, 20, 34, 56
    scale = (width - left - right) / end_us
    lanes = {1: ("IO", top), 2: ("compute", top + lane_h + 14)}
    height = top + 2 * lane_h + 14 + 70
    title = args.title or f"stile request timeline: {other.get('storage', '')} ({other.get('mode', '')})"
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" font-family="sans-serif" font-size="12">',
           f'<rect width="{width}" height="{height}" fill="white"/>',
           f'<text x="{left}" y="24" font-size="14" font-weight="bold">{escape(title)}</text>']
    for tid, (name, y) in lanes.items():
        out.append(f'<text x="{left - 8}" y="{y + lane_h / 2 + 4}" text-anchor="end">{name}</text>')
        out.append(f'<line x1="{left}" y1="{y + lane_h}" x2="{width - right}" y2="{y + lane_h}" stroke="#ccc"/>')
    for e in events:
        kind = e["name"].split(" ")[0]
        tid = e["tid"]
        if tid not in lanes:
            continue
        y = lanes[tid][1]
        x = left + e["ts"] * scale
        w = max(e["dur"] * scale, 0.8)
        color = COLORS.get(kind, "#999")
        out.append(f'<rect x="{x:.2f}" y="{y + 3}" width="{w:.2f}" height="{lane_h - 6}" fill="{color}" '
                   f'stroke="white" stroke-width="0.5"><title>{escape(e["name"])}: {e["dur"] / 1e3:.2f} ms</title></rect>')
        label = e["name"].replace("layer ", "L")
        if kind in ("read", "compute") and w > 7 * len(label):
            out.append(f'<text x="{x + w / 2:.2f}" y="{y + lane_h / 2 + 4}" text-anchor="middle" fill="white">{escape(label)}</text>')
    axis_y = top + 2 * lane_h + 14 + 20
    step = nice_step(end_us / 1e3)
    t = 0.0
    while t <= end_us / 1e3 + 1e-9:
        x = left + t * 1e3 * scale
        out.append(f'<line x1="{x:.2f}" y1="{axis_y - 6}" x2="{x:.2f}" y2="{axis_y}" stroke="#333"/>')
        out.append(f'<text x="{x:.2f}" y="{axis_y + 14}" text-anchor="middle">{t:g}</text>')
        t += step
    out.append(f'<text x="{width - right}" y="{axis_y + 14}" text-anchor="end">ms</text>')
    legend_x = left
    for kind in ("embeddings", "read", "verify", "compute", "stall"):
        out.append(f'<rect x="{legend_x}" y="{axis_y + 26}" width="12" height="12" fill="{COLORS[kind]}"/>')
        out.append(f'<text x="{legend_x + 16}" y="{axis_y + 36}">{kind}</text>')
        legend_x += 100
    out.append(f'<text x="{width - right}" y="{axis_y + 36}" text-anchor="end">total {other.get("total_ms", end_us / 1e3):.1f} ms</text>')
    out.append("</svg>")
    with open(args.out, "w", encoding="utf-8") as f:
        f.write("\n".join(out) + "\n")
    print(f"plot_timeline: wrote {args.out}")


def nice_step(span_ms):
    for step in (0.5, 1, 2, 5, 10, 20, 50, 100, 200, 500, 1000):
        if span_ms / step <= 12:
            return step
    return 2000


def escape(s):
    return str(s).replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


if __name__ == "__main__":
    main()
