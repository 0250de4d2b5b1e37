"""stile-serve against a FastAPI wrapper around sentence-transformers, on one machine, in one
alternating run: for 1, 4 and 16 concurrent clients and requests of 1 and 32 texts, each server
(stile-serve at the CPU's best SIMD target and forced to AVX2, and the peer) in turn takes the same
closed-loop load (each client sends its next request when the last is answered) for a fixed time,
several rounds; the figures are req/s, texts/s and the p50 / p99 latency over all rounds, and the
ratios to the peer.

    .venv-ref/bin/python bench/serve_bench.py [--seconds 5] [--rounds 2] [--threads 2]
        [--serve build/native/tools/stile-serve] [--json docs/benchmarks/serving.json]
        [--svg docs/benchmarks/serving_throughput.svg] [--plot-only]

Both servers compute with --threads threads; the clients run in this process (Python threads over
http.client, keep-alive) on the same cores, so a client's own cost is in every figure, alike for
all. The texts are SST-2 dev sentences (each request a different slice).
"""
import argparse
import http.client
import json
import os
import platform
import subprocess
import sys
import threading
import time

from machine import cpu_name  # bench/machine.py

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
MODEL = os.path.expanduser("~/.cache/stile/all-MiniLM-L6-v2")
SST2_DEV = os.path.join(ROOT, "..", "shared/data/sst2/dev.tsv")


def free_port():
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_stile(serve, threads, *flags):
    port = free_port()
    proc = subprocess.Popen([serve, "--model", MODEL, "--port", str(port), "--threads", str(threads),
                             "--auto-truncate", *flags], stdout=subprocess.PIPE, text=True)
    line = proc.stdout.readline()
    if "serving" not in line:
        raise RuntimeError("stile-serve did not start: " + line)
    return proc, port


def start_peer(threads):
    port = free_port()
    proc = subprocess.Popen([sys.executable, os.path.join(ROOT, "bench/peers/fastapi_embeddings.py"), MODEL, str(port),
                             str(threads)], stdout=subprocess.PIPE, text=True)
    if proc.stdout.readline().strip() != "ready":
        raise RuntimeError("the FastAPI peer did not start")
    return proc, port


def load(port, clients, batch, seconds, sentences):
    """Closed-loop load; returns (requests answered, latencies in s, errors)."""
    latencies, errors = [], [0]
    lock = threading.Lock()
    stop_at = time.perf_counter() + seconds

    def client(k):
        c = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
        mine, i = [], k * 97
        while time.perf_counter() < stop_at:
            start = (i * batch) % (len(sentences) - batch)
            body = json.dumps({"input": sentences[start:start + batch], "model": "all-MiniLM-L6-v2"})
            t0 = time.perf_counter()
            c.request("POST", "/v1/embeddings", body=body, headers={"Content-Type": "application/json"})
            r = c.getresponse()
            payload = r.read()
            t1 = time.perf_counter()
            if r.status != 200 or len(json.loads(payload)["data"]) != batch:
                with lock:
                    errors[0] += 1
            mine.append(t1 - t0)
            i += 1
        c.close()
        with lock:
            latencies.extend(mine)

    threads = [threading.Thread(target=client, args=(k,)) for k in range(clients)]
    begin = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return len(latencies), time.perf_counter() - begin, latencies, errors[0]


def percentile(values, p):
    values = sorted(values)
    return values[min(len(values) - 1, int(round(p / 100 * (len(values) - 1))))]


def plot(out, svg_path):
    """Requests per second against concurrent clients, one line per server and request size."""
    colors = {"stile-serve": "#1f77b4", "stile-serve (AVX2)": "#6baed6", "FastAPI + sentence-transformers": "#d62728"}
    rows = out["results"]
    clients = sorted({r["clients"] for r in rows})
    top = max(r["req_per_s"] for r in rows) * 1.1
    w, h, left, right, pad, bottom = 640, 360, 60, 250, 20, 40
    x = lambda c: left + (w - left - right) * clients.index(c) / max(1, len(clients) - 1)
    y = lambda v: pad + (h - pad - bottom) * (1 - v / top)
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" font-family="sans-serif" font-size="12">',
             f'<rect width="{w}" height="{h}" fill="white"/>',
             f'<line x1="{left}" y1="{h - bottom}" x2="{w - right}" y2="{h - bottom}" stroke="black"/>',
             f'<line x1="{left}" y1="{pad}" x2="{left}" y2="{h - bottom}" stroke="black"/>',
             f'<text x="{(left + w - right) / 2}" y="{h - 8}" text-anchor="middle">concurrent clients</text>',
             f'<text x="14" y="{(h - bottom) / 2}" transform="rotate(-90 14 {(h - bottom) / 2})" text-anchor="middle">requests/s</text>']
    for c in clients:
        parts.append(f'<text x="{x(c)}" y="{h - bottom + 15}" text-anchor="middle">{c}</text>')
    for k in range(5):
        v = top * k / 4
        parts.append(f'<text x="{left - 5}" y="{y(v) + 4}" text-anchor="end">{v:.0f}</text>')
    legend = 0
    for name, color in colors.items():
        for batch, dash in ((1, ""), (32, ' stroke-dasharray="5,3"')):
            pts = sorted((r["clients"], r["req_per_s"]) for r in rows if r["server"] == name and r["texts_per_request"] == batch)
            if not pts:
                continue
            path = " ".join(f"{x(c):.1f},{y(v):.1f}" for c, v in pts)
            parts.append(f'<polyline points="{path}" fill="none" stroke="{color}" stroke-width="2"{dash}/>')
            ly = pad + 16 * legend
            parts.append(f'<line x1="{w - right + 15}" y1="{ly}" x2="{w - right + 40}" y2="{ly}" stroke="{color}" stroke-width="2"{dash}/>')
            parts.append(f'<text x="{w - right + 45}" y="{ly + 4}">{name}, {batch} text{"s" if batch > 1 else ""}</text>')
            legend += 1
    parts.append(f'<text x="{left}" y="{pad - 6}">{out["cpu"]}, {out["threads"]} compute threads</text>')
    parts.append("</svg>")
    with open(svg_path, "w", encoding="utf-8") as f:
        f.write("\n".join(parts) + "\n")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seconds", type=float, default=5.0, help="load time per server per round and case")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--threads", type=int, default=2, help="compute threads of each server")
    ap.add_argument("--serve", default=os.path.join(ROOT, "build/native/tools/stile-serve"))
    ap.add_argument("--json", default=os.path.join(ROOT, "docs/benchmarks/serving.json"))
    ap.add_argument("--svg", default=os.path.join(ROOT, "docs/benchmarks/serving_throughput.svg"))
    ap.add_argument("--plot-only", action="store_true", help="redraw the SVG from the JSON, run nothing")
    args = ap.parse_args()
    if args.plot_only:
        with open(args.json, encoding="utf-8") as f:
            plot(json.load(f), args.svg)
        return
    with open(SST2_DEV, encoding="utf-8") as f:
        sentences = [line.split("\t")[0] for line in f.read().splitlines()[1:]]

    servers = {"stile-serve": start_stile(args.serve, args.threads),
               "stile-serve (AVX2)": start_stile(args.serve, args.threads, "--target", "AVX2"),
               "FastAPI + sentence-transformers": start_peer(args.threads)}
    cases = [(c, b) for b in (1, 32) for c in (1, 4, 16)]
    results = []
    try:
        for name, (_, port) in servers.items():  # warm-up: first requests, allocations
            load(port, 4, 32, 2.0, sentences)
        total = len(cases) * args.rounds * len(servers)
        step = 0
        for clients, batch in cases:
            acc = {name: {"requests": 0, "seconds": 0.0, "latencies": [], "errors": 0} for name in servers}
            for _ in range(args.rounds):
                for name, (_, port) in servers.items():  # alternate the servers within each round
                    step += 1
                    print(f"[{step}/{total}] {name}: {clients} clients x {batch} texts", file=sys.stderr, flush=True)
                    n, elapsed, lat, err = load(port, clients, batch, args.seconds, sentences)
                    a = acc[name]
                    a["requests"] += n
                    a["seconds"] += elapsed
                    a["latencies"] += lat
                    a["errors"] += err
            for name, a in acc.items():
                rps = a["requests"] / a["seconds"]
                results.append({"server": name, "clients": clients, "texts_per_request": batch, "requests": a["requests"],
                                "errors": a["errors"], "req_per_s": rps, "texts_per_s": rps * batch,
                                "p50_ms": 1e3 * percentile(a["latencies"], 50),
                                "p99_ms": 1e3 * percentile(a["latencies"], 99)})
    finally:
        for proc, _ in servers.values():
            proc.terminate()
            proc.wait(timeout=60)

    import sentence_transformers
    import torch
    out = {"cpu": cpu_name(), "python": platform.python_version(), "torch": torch.__version__,
           "sentence_transformers": sentence_transformers.__version__, "threads": args.threads,
           "seconds_per_round": args.seconds, "rounds": args.rounds, "results": results}
    with open(args.json, "w", encoding="utf-8") as f:
        json.dump(out, f, indent=1)
    plot(out, args.svg)
    print(f"CPU: {out['cpu']}; {args.threads} compute threads per server; {args.rounds} rounds x {args.seconds} s\n")
    print("| clients | texts/request | server | req/s | texts/s | p50 ms | p99 ms | req/s vs the peer | errors |")
    print("|---:|---:|---|---:|---:|---:|---:|---:|---:|")
    by = {(r["server"], r["clients"], r["texts_per_request"]): r for r in results}
    for clients, batch in cases:
        peer = by[("FastAPI + sentence-transformers", clients, batch)]
        for name in servers:
            r = by[(name, clients, batch)]
            print(f"| {clients} | {batch} | {name} | {r['req_per_s']:.1f} | {r['texts_per_s']:.0f} | {r['p50_ms']:.1f} | "
                  f"{r['p99_ms']:.1f} | {r['req_per_s'] / peer['req_per_s']:.2f}x | {r['errors']} |")


if __name__ == "__main__":
    main()
