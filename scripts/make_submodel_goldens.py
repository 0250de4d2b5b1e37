#!/usr/bin/env python3
"""Write golden outputs of partial BERT submodels (the reference: transformers' BertModel) for the
C++ tests of the elastic engine.

Run with the reference venv (see bench/peers/README.md for its setup):

    HF_HUB_OFFLINE=1 .venv-ref/bin/python scripts/make_submodel_goldens.py \
        [--model ~/.cache/stile/all-MiniLM-L6-v2] [--out tests/model/data]

A submodel keeps the first n layers and, in each, m of the M = num_heads shards (docs/shards.md:
shard i = head i plus FFN neurons [i d_ff/M, (i+1) d_ff/M)). The reference runs the full layers
with everything else masked to zero:
  * a head that is not chosen: its columns of attention.output.dense.weight are zeroed, so its
    context adds nothing (zeroing its Q/K/V rows would not: softmax of zeros still averages V's bias);
  * an FFN neuron that is not chosen: its row of intermediate.dense.weight and its bias are zeroed,
    so GELU(0) = 0 feeds nothing to output.dense;
  * layers past n are dropped.
Writes into --out:
  submodel_goldens.json  the cases: n, the chosen shards of each layer, the sentences' token ids,
                         and where each last_hidden_state ([tokens x hidden] f32) is in the .bin
  submodel_goldens.bin   the hidden states, little-endian f32, back to back
"""
import argparse
import json
import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import numpy as np  # noqa: E402
import torch  # noqa: E402
from transformers import AutoTokenizer, BertModel  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

SENTENCES = [
    "A man is eating food.",
    "it 's a charming and often affecting journey .",
]

# (name, n, chosen shards per layer). Fixed, out-of-order subsets, different in every layer.
CASES = [
    ("n3_m5", 3, [[0, 3, 5, 7, 11], [1, 2, 4, 8, 10], [11, 6, 9, 0, 5]]),
    ("n1_m1", 1, [[4]]),
    ("n6_m12", 6, [list(range(12))] * 6),
    ("n2_m11", 2, [[i for i in range(12) if i != 2], [i for i in range(12) if i != 9]]),
]


def masked_model(base_dir, n, shards):
    model = BertModel.from_pretrained(base_dir, attn_implementation="eager").eval()
    cfg = model.config
    heads, d_ff = cfg.num_attention_heads, cfg.intermediate_size
    head_dim = cfg.hidden_size // heads
    ffn_per_shard = d_ff // heads
    with torch.no_grad():
        for l in range(n):
            layer = model.encoder.layer[l]
            for s in range(heads):
                if s in shards[l]:
                    continue
                layer.attention.output.dense.weight[:, s * head_dim:(s + 1) * head_dim] = 0
                rows = slice(s * ffn_per_shard, (s + 1) * ffn_per_shard)
                layer.intermediate.dense.weight[rows, :] = 0
                layer.intermediate.dense.bias[rows] = 0
    model.encoder.layer = model.encoder.layer[:n]
    return model


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default=os.path.expanduser("~/.cache/stile/all-MiniLM-L6-v2"))
    ap.add_argument("--out", default=os.path.join(ROOT, "tests", "model", "data"))
    args = ap.parse_args()
    torch.manual_seed(0)
    tokenizer = AutoTokenizer.from_pretrained(args.model)
    encoded = [tokenizer(s, return_tensors="pt") for s in SENTENCES]
    blob = bytearray()
    cases = []
    for name, n, shards in CASES:
        model = masked_model(args.model, n, shards)
        outputs = []
        for s, enc in zip(SENTENCES, encoded):
            with torch.no_grad():
                hidden = model(**enc).last_hidden_state[0].numpy().astype("<f4")
            outputs.append({"text": s, "ids": enc["input_ids"][0].tolist(), "offset": len(blob),
                            "rows": int(hidden.shape[0]), "cols": int(hidden.shape[1])})
            blob += hidden.tobytes()
        cases.append({"name": name, "n": n, "shards": shards, "outputs": outputs})
        print(f"{name}: n={n}, m={[len(x) for x in shards]}", flush=True)
    meta = {"model": "sentence-transformers/all-MiniLM-L6-v2",
            "reference": f"transformers {__import__('transformers').__version__}, torch {torch.__version__}, fp32, eager",
            "shards_per_layer": 12, "cases": cases}
    with open(os.path.join(args.out, "submodel_goldens.bin"), "wb") as f:
        f.write(bytes(blob))
    with open(os.path.join(args.out, "submodel_goldens.json"), "w") as f:
        json.dump(meta, f, indent=1)
        f.write("\n")
    print(f"wrote {len(blob)} bytes of hidden states for {len(cases)} cases", flush=True)


if __name__ == "__main__":
    main()
