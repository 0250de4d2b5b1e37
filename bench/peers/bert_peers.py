#!/usr/bin/env python3
"""Peer latencies for BERT inference on this machine: PyTorch and ONNX Runtime, batch 1.

For each engine, thread count t and sequence length L, runs one sentence of exactly L tokens
([CLS] + L-2 word pieces + [SEP], attention mask all ones) through the model's BertModel
(last_hidden_state; no pooling) and reports the median, p10 and p90 latency in milliseconds.

Engines:
  pytorch       transformers BertModel, eval, torch.inference_mode, torch.set_num_threads(t)
  onnxruntime   the BertModel exported once with torch.onnx.export (dynamic batch/sequence axes),
                InferenceSession, intra_op_num_threads=t, inter_op_num_threads=1, ORT_ENABLE_ALL
  onnxruntime-opt  the same export passed through onnxruntime.transformers.optimizer
                (model_type='bert': fused Attention / SkipLayerNorm / BiasGelu / EmbedLayerNorm),
                then run like 'onnxruntime'. Skipped, with a note in the JSON, if the optimizer fails.
  onnxruntime-int8     the same export through onnxruntime.quantization.quantize_dynamic: int8
                weights (QInt8, per output channel), activations quantized at run time (uint8,
                per tensor); then run like 'onnxruntime'. Its max abs diff against the fp32 ONNX
                model is recorded (onnx.<engine>_vs_onnx_fp32_max_abs).
  onnxruntime-int8-pt  the same with one weight scale per tensor (per_channel=False).

Usage (see bench/peers/README.md for the venv):
  HF_HUB_OFFLINE=1 .venv-ref/bin/python bench/peers/bert_peers.py --out build/peers.json \
      [--model ~/.cache/stile/all-MiniLM-L6-v2] [--threads 1,2] [--lengths 16,32,64,128,256] \
      [--seconds 1.5] [--engines pytorch,onnxruntime,onnxruntime-opt,onnxruntime-int8,onnxruntime-int8-pt]
"""
import argparse
import json
import os
import platform
import statistics
import sys
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import numpy as np  # noqa: E402
import torch  # noqa: E402


def log(*a):
    print(*a, file=sys.stderr, flush=True)


def cpu_info():
    info = {"model": platform.processor() or "unknown", "flags": []}
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                k, _, v = line.partition(":")
                k, v = k.strip(), v.strip()
                if k == "model name":
                    info["model"] = v
                elif k == "flags" and not info["flags"]:
                    fl = set(v.split())
                    info["flags"] = sorted(x for x in fl if x in {
                        "avx", "avx2", "fma", "f16c", "avx512f", "avx512bw", "avx512vl", "avx512_vnni",
                        "avx512_bf16", "avx_vnni", "amx_tile", "sse4_2"})
                elif k in ("Features",) and not info["flags"]:  # Arm
                    info["flags"] = v.split()
    except OSError:
        pass
    info["logical_cpus"] = os.cpu_count()
    try:
        info["usable_cpus"] = len(os.sched_getaffinity(0))
    except AttributeError:
        info["usable_cpus"] = os.cpu_count()
    info["machine"] = platform.machine()
    return info


def loadavg():
    try:
        return [float(x) for x in open("/proc/loadavg").read().split()[:3]]
    except OSError:
        return None


def make_ids(length, vocab_size):
    # [CLS] w w w ... [SEP]: cycle through ordinary whole-word ids (2000..2999) so that
    # embeddings differ per position but stay realistic
    body = [2000 + (i * 37) % 1000 for i in range(length - 2)]
    ids = np.array([[101] + body + [102]], dtype=np.int64)
    assert ids.shape == (1, length) and ids.max() < vocab_size
    return ids


def time_cell(fn, seconds, min_reps, warmup):
    for _ in range(warmup):
        fn()
    times = []
    t_end = time.perf_counter() + seconds
    while len(times) < min_reps or time.perf_counter() < t_end:
        t0 = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t0) * 1e3)
        if len(times) >= 100000:
            break
    times.sort()
    q = lambda p: times[min(len(times) - 1, int(round(p * (len(times) - 1))))]  # noqa: E731
    return {"median_ms": statistics.median(times), "p10_ms": q(0.10), "p90_ms": q(0.90),
            "min_ms": times[0], "n": len(times)}


class _LastHidden(torch.nn.Module):
    """forward(input_ids, attention_mask, token_type_ids) -> last_hidden_state, keyword call inside
    (transformers 5 BertModel.forward is not safe to call positionally from the exporters)."""

    def __init__(self, bert):
        super().__init__()
        self.bert = bert

    def forward(self, input_ids, attention_mask, token_type_ids):
        return self.bert(input_ids=input_ids, attention_mask=attention_mask,
                         token_type_ids=token_type_ids).last_hidden_state


def export_onnx(model_dir, path, opset):
    """Export BertModel to ONNX with dynamic batch/sequence axes. Returns a note on how.

    Exports the eager-attention model with the TorchScript exporter: that graph is the one the
    ORT transformer optimizer fuses fully (EmbedLayerNormalization, Attention, SkipLayerNorm,
    BiasGelu); SDPA or the dynamo exporter leave attention unfused."""
    from transformers import AutoModel
    bert = AutoModel.from_pretrained(model_dir, attn_implementation="eager").eval()
    model = _LastHidden(bert)
    ids = torch.tensor(make_ids(16, bert.config.vocab_size))
    args = (ids, torch.ones_like(ids), torch.zeros_like(ids))
    names = ["input_ids", "attention_mask", "token_type_ids"]
    dyn = {n: {0: "batch", 1: "sequence"} for n in names}
    dyn["last_hidden_state"] = {0: "batch", 1: "sequence"}
    tmp = path + ".tmp.onnx"
    errors = []
    # the TorchScript exporter gives the graph patterns the ORT transformer optimizer fuses best;
    # fall back to the dynamo exporter where the legacy one is gone
    for dynamo in (False, True):
        try:
            kw = dict(input_names=names, output_names=["last_hidden_state"], opset_version=opset,
                      dynamic_axes=dyn, do_constant_folding=True, dynamo=dynamo)
            if dynamo:
                kw["external_data"] = False
            torch.onnx.export(model, args, tmp, **kw)
            os.replace(tmp, path)
            return f"torch.onnx.export dynamo={dynamo} opset={opset} attention=eager"
        except Exception as e:  # noqa: BLE001
            errors.append(f"dynamo={dynamo}: {type(e).__name__}: {str(e)[:300]}")
            log(f"  export with dynamo={dynamo} failed: {errors[-1]}")
    raise RuntimeError("ONNX export failed: " + " | ".join(errors))


# engine -> per_channel of its dynamic int8 quantization
INT8_ENGINES = {"onnxruntime-int8": True, "onnxruntime-int8-pt": False}


def quantize_int8(onnx_path, out_path, per_channel):
    """ONNX Runtime's dynamic quantization of the fp32 export: MatMul/Gemm weights to int8 (QInt8,
    symmetric), per output channel or per tensor; activations quantized per call. Cached."""
    if os.path.exists(out_path):
        return
    from onnxruntime.quantization import QuantType, quantize_dynamic
    log(f"quantizing (dynamic, QInt8, per_channel={per_channel}) -> {out_path}")
    tmp = out_path + ".tmp.onnx"
    quantize_dynamic(onnx_path, tmp, weight_type=QuantType.QInt8, per_channel=per_channel)
    os.replace(tmp, out_path)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True, help="JSON file to write")
    ap.add_argument("--model", default=os.path.expanduser("~/.cache/stile/all-MiniLM-L6-v2"))
    ap.add_argument("--cache", default=os.path.expanduser("~/.cache/stile/peers"),
                    help="where the exported ONNX models are kept")
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--lengths", default="16,32,64,128,256")
    ap.add_argument("--engines", default="pytorch,onnxruntime,onnxruntime-opt")
    ap.add_argument("--seconds", type=float, default=1.5, help="timed seconds per cell")
    ap.add_argument("--min-reps", type=int, default=5, help="at least this many timed runs per cell")
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--opset", type=int, default=17)
    args = ap.parse_args()
    threads = [int(x) for x in args.threads.split(",")]
    lengths = [int(x) for x in args.lengths.split(",")]
    engines = [x.strip() for x in args.engines.split(",") if x.strip()]

    import onnxruntime as ort
    import transformers
    from transformers import AutoModel

    torch.set_num_interop_threads(1)
    model = AutoModel.from_pretrained(args.model).eval()
    cfg = model.config
    assert max(lengths) <= cfg.max_position_embeddings
    name = os.path.basename(os.path.normpath(args.model))
    load0 = loadavg()
    report = {
        "schema": "stile-peers 1",
        "model": {"name": name, "layers": cfg.num_hidden_layers, "hidden": cfg.hidden_size,
                  "heads": cfg.num_attention_heads, "intermediate": cfg.intermediate_size,
                  "attn_implementation": getattr(cfg, "_attn_implementation", None)},
        "machine": {"cpu": cpu_info(), "os": platform.platform(), "python": platform.python_version(),
                    "loadavg_before": load0},
        "versions": {"torch": torch.__version__, "onnxruntime": ort.__version__,
                     "transformers": transformers.__version__, "numpy": np.__version__},
        "settings": {"batch": 1, "seconds_per_cell": args.seconds, "min_reps": args.min_reps,
                     "warmup": args.warmup, "input": "[CLS] + (L-2) word ids + [SEP], mask all ones",
                     "output": "last_hidden_state (no pooling)"},
        "notes": [],
        "results": [],
    }
    if load0 and load0[0] > 0.5 * (os.cpu_count() or 1):
        report["notes"].append(f"machine busy at start (loadavg {load0}): figures are preliminary")

    sessions = {}
    if any(e.startswith("onnxruntime") for e in engines):
        os.makedirs(args.cache, exist_ok=True)
        tag = f"{name}-torch{torch.__version__.split('+')[0]}-opset{args.opset}-eager-ts"
        onnx_path = os.path.join(args.cache, tag + ".onnx")
        if not os.path.exists(onnx_path):
            log(f"exporting ONNX to {onnx_path}")
            note = export_onnx(args.model, onnx_path, args.opset)
            with open(onnx_path + ".how", "w") as f:
                f.write(note + "\n")
        how = open(onnx_path + ".how").read().strip() if os.path.exists(onnx_path + ".how") else "?"
        report["onnx"] = {"path": onnx_path, "export": how}
        if "onnxruntime" in engines:
            sessions["onnxruntime"] = onnx_path
        if "onnxruntime-opt" in engines:
            opt_path = os.path.join(args.cache, tag + ".opt.onnx")
            try:
                if not os.path.exists(opt_path):
                    from onnxruntime.transformers import optimizer
                    log(f"optimizing with onnxruntime.transformers.optimizer -> {opt_path}")
                    om = optimizer.optimize_model(onnx_path, model_type="bert", num_heads=cfg.num_attention_heads,
                                                  hidden_size=cfg.hidden_size, opt_level=0, use_gpu=False)
                    stats = om.get_fused_operator_statistics()
                    om.save_model_to_file(opt_path + ".tmp.onnx")
                    os.replace(opt_path + ".tmp.onnx", opt_path)
                    with open(opt_path + ".stats.json", "w") as f:
                        json.dump(stats, f)
                stats = json.load(open(opt_path + ".stats.json")) if os.path.exists(opt_path + ".stats.json") else {}
                report["onnx"]["optimizer_fused_ops"] = {k: v for k, v in stats.items() if v}
                sessions["onnxruntime-opt"] = opt_path
            except Exception as e:  # noqa: BLE001
                msg = f"onnxruntime transformer optimizer failed, onnxruntime-opt skipped: {type(e).__name__}: {e}"
                log(msg)
                report["notes"].append(msg[:500])

        for eng, per_channel in INT8_ENGINES.items():
            if eng not in engines:
                continue
            q_path = os.path.join(args.cache, tag + (".int8-pc.onnx" if per_channel else ".int8-pt.onnx"))
            try:
                quantize_int8(onnx_path, q_path, per_channel)
                sessions[eng] = q_path
            except Exception as e:  # noqa: BLE001
                msg = f"onnxruntime dynamic quantization failed, {eng} skipped: {type(e).__name__}: {e}"
                log(msg)
                report["notes"].append(msg[:500])

    def ort_session(path, t):
        so = ort.SessionOptions()
        so.intra_op_num_threads = t
        so.inter_op_num_threads = 1
        so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
        so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        return ort.InferenceSession(path, sess_options=so, providers=["CPUExecutionProvider"])

    # correctness check once: ONNX vs PyTorch at the longest length
    check_ids = make_ids(max(lengths), cfg.vocab_size)
    feeds = {"input_ids": check_ids, "attention_mask": np.ones_like(check_ids), "token_type_ids": np.zeros_like(check_ids)}
    with torch.inference_mode():
        ref = model(**{k: torch.from_numpy(v) for k, v in feeds.items()}).last_hidden_state.numpy()
    outputs = {}
    for eng, path in sessions.items():
        s = ort_session(path, 1)
        got = s.run(None, {i.name: feeds[i.name] for i in s.get_inputs()})[0]
        outputs[eng] = got
        d = float(np.abs(got - ref).max())
        report["onnx"][f"{eng}_vs_pytorch_max_abs"] = d
        log(f"{eng}: max |ONNX - PyTorch| at L={max(lengths)}: {d:.2e}")
    # the int8 models against the fp32 ONNX model they were quantized from (its own session when
    # the 'onnxruntime' engine is not among those timed)
    int8 = [e for e in INT8_ENGINES if e in sessions]
    if int8:
        if "onnxruntime" in outputs:
            fp32 = outputs["onnxruntime"]
        else:
            s = ort_session(onnx_path, 1)
            fp32 = s.run(None, {i.name: feeds[i.name] for i in s.get_inputs()})[0]
        scale = float(np.abs(fp32).max())
        for eng in int8:
            d = float(np.abs(outputs[eng] - fp32).max())
            report["onnx"][f"{eng}_vs_onnx_fp32_max_abs"] = d
            log(f"{eng}: max |int8 - fp32 ONNX| at L={max(lengths)}: {d:.2e} (max |fp32| {scale:.2f})")

    for eng in engines:
        if eng not in ("pytorch",) and eng not in sessions:
            continue
        for t in threads:
            if eng == "pytorch":
                torch.set_num_threads(t)
            else:
                sess = ort_session(sessions[eng], t)
                in_names = [i.name for i in sess.get_inputs()]
            for L in lengths:
                ids = make_ids(L, cfg.vocab_size)
                if eng == "pytorch":
                    x = torch.from_numpy(ids)
                    m, tt = torch.ones_like(x), torch.zeros_like(x)

                    def fn(x=x, m=m, tt=tt):
                        with torch.inference_mode():
                            return model(input_ids=x, attention_mask=m, token_type_ids=tt).last_hidden_state
                else:
                    fd = {"input_ids": ids, "attention_mask": np.ones_like(ids), "token_type_ids": np.zeros_like(ids)}
                    fd = {k: v for k, v in fd.items() if k in in_names}

                    def fn(sess=sess, fd=fd):
                        return sess.run(None, fd)
                r = time_cell(fn, args.seconds, args.min_reps, args.warmup)
                r.update(engine=eng, threads=t, seq_len=L, batch=1)
                report["results"].append(r)
                log(f"  {eng:16s} t={t} L={L:4d}  median {r['median_ms']:8.2f} ms  "
                    f"p10 {r['p10_ms']:8.2f}  p90 {r['p90_ms']:8.2f}  n={r['n']}")

    report["machine"]["loadavg_after"] = loadavg()
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    tmp = args.out + ".tmp"
    with open(tmp, "w") as f:
        json.dump(report, f, indent=1)
        f.write("\n")
    os.replace(tmp, args.out)

    # table: rows engine/threads, columns lengths, median ms
    print(f"# {name}, batch 1, median ms (p10-p90); cpu: {report['machine']['cpu']['model']}, "
          f"{report['machine']['cpu']['usable_cpus']} cpus; torch {torch.__version__}, onnxruntime {ort.__version__}")
    print(f"{'engine':18s} {'thr':>3s} " + " ".join(f"{'L=' + str(L):>20s}" for L in lengths))
    keys = []
    for r in report["results"]:
        if (r["engine"], r["threads"]) not in keys:
            keys.append((r["engine"], r["threads"]))
    for eng, t in keys:
        cells = []
        for L in lengths:
            r = next((r for r in report["results"] if (r["engine"], r["threads"], r["seq_len"]) == (eng, t, L)), None)
            cells.append(f"{r['median_ms']:7.2f} ({r['p10_ms']:.1f}-{r['p90_ms']:.1f})" if r else "-")
        print(f"{eng:18s} {t:3d} " + " ".join(f"{c:>20s}" for c in cells))
    for n in report["notes"]:
        print("note:", n)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
