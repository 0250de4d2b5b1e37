#!/usr/bin/env python3
"""The n x m accuracy heat map of a model: one panel per CSV (`train_heads --dev-csv`, one per
bitwidth: shape,layers,shards,bits,calibration_accuracy,dev_accuracy), rows = layers n (1..N),
columns = shards per layer m (1..M), each cell its SST-2 dev accuracy. Plain Python, no plotting
library needed.

    scripts/plot_heatmap.py OUT.svg "title" A.csv [B.csv ...]
"""
import csv
import sys


def esc(s):
    return str(s).replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def color(v, lo, hi):
    t = 0.0 if hi <= lo else max(0.0, min(1.0, (v - lo) / (hi - lo)))
    # white-ish (low) to dark blue (high), a light-to-dark ramp that prints in grey too
    r = int(247 + (8 - 247) * t)
    g = int(251 + (48 - 251) * t)
    b = int(255 + (107 - 255) * t)
    return f"rgb({r},{g},{b})"


def main():
    if len(sys.argv) < 4:
        print(__doc__, file=sys.stderr)
        return 2
    out, title, files = sys.argv[1], sys.argv[2], sys.argv[3:]
    panels = []
    for f in files:
        cells, bits = {}, None
        with open(f, newline="") as fh:
            for row in csv.DictReader(fh):
                if row["shape"] == "gold":
                    continue
                cells[(int(row["layers"]), int(row["shards"]))] = 100.0 * float(row["dev_accuracy"])
                bits = row["bits"]
        panels.append((bits, cells))
    values = [v for _, c in panels for v in c.values()]
    lo, hi = min(values), max(values)
    n_max = max(n for _, c in panels for n, _ in c)
    m_max = max(m for _, c in panels for _, m in c)
    cw, ch, left, top, gap = 34, 24, 50, 60, 40
    pw = left + cw * m_max
    width = gap + len(panels) * (pw + gap)
    height = top + ch * n_max + 70
    o = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" font-family="sans-serif" '
         f'font-size="10">', f'<rect width="{width}" height="{height}" fill="white"/>',
         f'<text x="{gap}" y="20" font-size="14" font-weight="bold">{esc(title)}</text>',
         f'<text x="{gap}" y="38" font-size="11">SST-2 dev accuracy (%) of each n x m submodel; colour from '
         f'{lo:.1f} (light) to {hi:.1f} (dark)</text>']
    for i, (bits, cells) in enumerate(panels):
        x0 = gap + i * (pw + gap) + left
        o.append(f'<text x="{x0}" y="{top - 6}" font-size="12" font-weight="bold">{esc(bits)} bits</text>')
        for (n, m), v in cells.items():
            x, y = x0 + (m - 1) * cw, top + (n - 1) * ch
            fill = color(v, lo, hi)
            text = "white" if (v - lo) > 0.55 * (hi - lo) else "black"
            o.append(f'<rect x="{x}" y="{y}" width="{cw - 1}" height="{ch - 1}" fill="{fill}"/>')
            o.append(f'<text x="{x + cw / 2 - 0.5}" y="{y + ch / 2 + 3.5}" text-anchor="middle" fill="{text}">'
                     f'{v:.1f}</text>')
        for n in range(1, n_max + 1):
            o.append(f'<text x="{x0 - 6}" y="{top + (n - 1) * ch + ch / 2 + 3.5}" text-anchor="end">n={n}</text>')
        for m in range(1, m_max + 1):
            o.append(f'<text x="{x0 + (m - 1) * cw + cw / 2}" y="{top + n_max * ch + 14}" '
                     f'text-anchor="middle">{m}</text>')
        o.append(f'<text x="{x0 + cw * m_max / 2}" y="{top + n_max * ch + 32}" text-anchor="middle">'
                 f'm (shards per layer)</text>')
    o.append("</svg>")
    with open(out, "w") as f:
        f.write("\n".join(o) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
