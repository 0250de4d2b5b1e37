#!/usr/bin/env python3
"""A sequence-classification checkpoint's logits from transformers against stile's `predict classify`
on SST-2 dev (or any file of one text a line): the max abs difference and the label agreement.

Run with the reference venv (bench/peers/README.md) after building predict (build/native):
    HF_HUB_OFFLINE=1 .venv-ref/bin/python scripts/compare_classifier_logits.py MODEL_DIR \\
        [--texts ../shared/data/sst2/dev.tsv] [--predict build/native/tools/predict]

The reference: AutoModelForSequenceClassification.from_pretrained(MODEL_DIR) in eval mode, fp32, one
text at a time, the tokenizer of MODEL_DIR (truncation to its length). stile: one predict run over
all texts, --format json.
"""
import argparse
import json
import os
import subprocess
import sys

os.environ.setdefault("HF_HUB_OFFLINE", "1")
import torch  # noqa: E402
from transformers import AutoModelForSequenceClassification, AutoTokenizer  # noqa: E402

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("model")
    p.add_argument("--texts", default=os.path.join(ROOT, "..", "shared/data/sst2/dev.tsv"),
                   help="a GLUE tsv (its first column, after the header) or a text file, one text a line")
    p.add_argument("--predict", default=os.path.join(ROOT, "build/native/tools/predict"))
    a = p.parse_args()
    with open(a.texts, encoding="utf-8") as f:
        lines = f.read().splitlines()
    texts = [line.split("\t")[0] for line in lines[1:]] if a.texts.endswith(".tsv") else lines
    torch.set_num_threads(1)
    model = AutoModelForSequenceClassification.from_pretrained(a.model).eval()
    tokenizer = AutoTokenizer.from_pretrained(a.model)
    ref = []
    with torch.no_grad():
        for t in texts:
            x = tokenizer(t, return_tensors="pt", truncation=True)
            ref.append(model(**x).logits[0].tolist())
    out = subprocess.run([a.predict, "classify", "--model", a.model, "--format", "json"], input="\n".join(texts) + "\n",
                         capture_output=True, text=True, check=True)
    got = [row["logits"] for row in json.loads(out.stdout)]
    assert len(got) == len(ref), (len(got), len(ref))
    worst = max(abs(g - r) for gs, rs in zip(got, ref) for g, r in zip(gs, rs))
    agree = sum(max(range(len(g)), key=g.__getitem__) == max(range(len(r)), key=r.__getitem__) for g, r in zip(got, ref))
    print(f"{len(texts)} texts: max |logit - transformers'| = {worst:.3g}; same label {agree}/{len(texts)}")
    return 0 if agree == len(texts) else 1


if __name__ == "__main__":
    sys.exit(main())
