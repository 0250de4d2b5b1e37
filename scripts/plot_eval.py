#!/usr/bin/env python3
"""Draws the SST-2 evaluation (the JSON `bench/eval_sst2 --json` writes) as two SVG pictures:
accuracy vs target latency, one line per method (gold as a dashed line), and accuracy vs
memory held between requests (when the run made the sweep). Plain Python, no plotting library needed.

    scripts/plot_eval.py eval.json docs/eval_accuracy_vs_target.svg docs/eval_accuracy_vs_preload.svg
"""
import json
import sys

PALETTE = ["#e15759", "#f28e2b", "#4e79a7", "#76b7b2", "#59a14f", "#edc948", "#b07aa1", "#ff9da7", "#9c755f"]


def esc(s):
    return str(s).replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def chart(title, xlabel, series, hline=None, xlog=False, ylabel="SST-2 dev accuracy (%)", ystep=5):
    """An SVG line chart of series [(name, [(x, y), ...]), ...]; also used by scripts/bench."""
    import math
    width, height, left, right, top, bottom = 760, 440, 70, 190, 40, 60
    xs = [x for _, pts in series for x, _ in pts]
    ys = [y for _, pts in series for _, y in pts] + ([hline[1]] if hline else [])
    fx = (lambda v: math.log2(v + 1)) if xlog else (lambda v: v)
    x0, x1 = fx(min(xs)), fx(max(xs))
    y0 = math.floor(min(ys) / ystep) * ystep
    y1 = math.ceil(max(ys) / ystep) * ystep + (ystep if max(ys) % ystep == 0 else 0)
    sx = lambda v: left + (fx(v) - x0) / ((x1 - x0) or 1) * (width - left - right)
    sy = lambda v: top + (y1 - v) / ((y1 - y0) or 1) * (height - top - bottom)
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" font-family="sans-serif" font-size="12">',
           f'<rect width="{width}" height="{height}" fill="white"/>',
           f'<text x="{left}" y="24" font-size="14" font-weight="bold">{esc(title)}</text>']
    y = y0
    while y <= y1:
        out.append(f'<line x1="{left}" y1="{sy(y):.1f}" x2="{width - right}" y2="{sy(y):.1f}" stroke="#eee"/>')
        out.append(f'<text x="{left - 6}" y="{sy(y) + 4:.1f}" text-anchor="end">{y:g}</text>')
        y += ystep
    for x in sorted(set(xs)):
        out.append(f'<text x="{sx(x):.1f}" y="{height - bottom + 18}" text-anchor="middle">{x:g}</text>')
    out.append(f'<text x="{(left + width - right) / 2}" y="{height - 20}" text-anchor="middle">{esc(xlabel)}</text>')
    out.append(f'<text x="18" y="{(top + height - bottom) / 2}" transform="rotate(-90 18 {(top + height - bottom) / 2})" '
               f'text-anchor="middle">{esc(ylabel)}</text>')
    if hline:
        out.append(f'<line x1="{left}" y1="{sy(hline[1]):.1f}" x2="{width - right}" y2="{sy(hline[1]):.1f}" '
                   f'stroke="#333" stroke-dasharray="6 4"/>')
    for i, (name, pts) in enumerate(series):
        color = PALETTE[i % len(PALETTE)]
        path = " ".join(f"{'M' if j == 0 else 'L'}{sx(x):.1f},{sy(v):.1f}" for j, (x, v) in enumerate(sorted(pts)))
        out.append(f'<path d="{path}" fill="none" stroke="{color}" stroke-width="2"/>')
        for x, v in pts:
            out.append(f'<circle cx="{sx(x):.1f}" cy="{sy(v):.1f}" r="3" fill="{color}"><title>{esc(name)}: {v:.1f}</title></circle>')
        ly = top + 16 * i + 8
        out.append(f'<line x1="{width - right + 14}" y1="{ly}" x2="{width - right + 34}" y2="{ly}" stroke="{color}" stroke-width="2"/>')
        out.append(f'<text x="{width - right + 40}" y="{ly + 4}">{esc(name)}</text>')
    if hline:
        ly = top + 16 * len(series) + 8
        out.append(f'<line x1="{width - right + 14}" y1="{ly}" x2="{width - right + 34}" y2="{ly}" stroke="#333" stroke-dasharray="6 4"/>')
        out.append(f'<text x="{width - right + 40}" y="{ly + 4}">{esc(hline[0])}</text>')
    out.append("</svg>")
    return "\n".join(out) + "\n"


def main():
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    try:
        with open(sys.argv[1], encoding="utf-8") as f:
            report = json.load(f)
        results = report["results"]
    except (OSError, ValueError, KeyError) as e:
        sys.exit(f"plot_eval: {sys.argv[1]}: not an eval_sst2 report ({e})")
    methods = []
    for r in results:
        if r["method"] not in methods:
            methods.append(r["method"])
    series = [(m, [(r["target_ms"], r["accuracy"]) for r in results if r["method"] == m]) for m in methods]
    gold = ("gold (fp32, no deadline)", report["gold"]["accuracy"]) if "gold" in report else None
    with open(sys.argv[2], "w", encoding="utf-8") as f:
        f.write(chart(f"Accuracy vs target latency ({report.get('storage', '')} storage)", "target latency T (ms)", series, gold))
    print(f"plot_eval: wrote {sys.argv[2]}")
    if len(sys.argv) > 3 and "preload_sweep" in report:
        sweep = report["preload_sweep"]
        t = sweep[0]["target_ms"]
        pts = [(s["preload_kb"], s["accuracy"]) for s in sweep]
        with open(sys.argv[3], "w", encoding="utf-8") as f:
            f.write(chart(f"Accuracy vs memory held between requests (ours, T = {t:g} ms)", "held: preload + word-row cache (KiB)", [("ours", pts)], gold, xlog=True))
        print(f"plot_eval: wrote {sys.argv[3]}")


if __name__ == "__main__":
    main()
