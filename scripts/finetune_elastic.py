#!/usr/bin/env python3
"""finetune_elastic: a task-tuned, width- and depth-adaptive (DynaBERT-style) MiniLM on SST-2.

Runs in the reference environment (torch + transformers from PyPI, see bench/peers/README.md);
never a dependency of the library or its tests. The model it writes is what stile converts
(tools/convert) and runs; its classifier goes into the store's heads sidecar
(tools/train_heads --model-head).

The classifier, by --head:
  mean (the default): the sentence-transformers head the engine computes for embeddings, mean
    pooling over tokens then L2 normalization, followed by one linear layer (2 x 384, bias):
        logits = W . normalize(mean_pool(hidden)) + b
    stored as `classifier.weight` / `classifier.bias` in model.safetensors, beside the BERT tensors;
    the output is a sentence-transformers-style directory.
  bert: transformers' BertForSequenceClassification head, the pooler (dense + tanh on [CLS], from
    the base model's pooler) and a linear classifier:
        logits = W . tanh(P hidden[0] + p) + b
    written as a BertForSequenceClassification directory (bert.* tensors, bert.pooler.dense.*,
    classifier.*; config.json with architectures, id2label and problem_type) that transformers and
    stile's TaskModel load as it is, and whose head convert keeps beside the store.

Phases (each resumable from <out>/.work/state.pt, written every --checkpoint-minutes):
  1. teacher: fine-tune the full model (6 layers x 12 heads) on SST-2 train less the calibration
     rows (the seeded split of calibrate/sst2.hpp, reimplemented in scripts/sst2_split.py).
  2. importance + reorder: head importance (|dL/d head-mask|) and FFN-neuron importance
     (|dL/d neuron-mask|) on --importance-rows train rows; every layer's heads and neurons are
     permuted so head i and neuron block i (d_ff/12 neurons) are the i-th best. A stile shard i is
     exactly head i + neuron block i (docs/shards.md), so "the first m shards" are the best m and
     the store needs no ranking (train_heads/eval without --importance keep shards 0..m-1).
  3. elastic distillation: the student starts as the reordered teacher; each step runs the full
     shape and --sub-shapes random n x m submodels (n = first n layers, as model/submodel.hpp keeps
     them; m = the first m heads and neuron blocks) and distills the teacher's logits (cached once,
     soft cross-entropy at temperature 1) into each.
Output: <out>/ a sentence-transformers-style directory (config.json, model.safetensors with the
classifier, tokenizer files, modules.json, 1_Pooling/, 2_Normalize/), or with --head bert a
BertForSequenceClassification directory (config.json, model.safetensors, tokenizer files), and
training.json (the run record: seed, steps, times, per-shape accuracies computed here in PyTorch).

  HF_HUB_OFFLINE=1 OMP_WAIT_POLICY=PASSIVE python scripts/finetune_elastic.py   # the full run (42 min wall on 2 cores, docs/benchmarks/elastic-engine.md)
  python scripts/finetune_elastic.py --short --out /tmp/m  # smoke test: a few dozen steps, < 1 min
  HF_HUB_OFFLINE=1 OMP_WAIT_POLICY=PASSIVE python scripts/finetune_elastic.py --head bert \
      --out ~/.cache/stile/minilm-sst2-bert   # the same run with transformers' sequence-classification head
"""
import argparse
import json
import math
import os
import random
import shutil
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import sst2_split  # noqa: E402

HOME = os.path.expanduser("~")
DEFAULT_BASE = os.path.join(HOME, ".cache/stile/all-MiniLM-L6-v2")
DEFAULT_OUT = os.path.join(HOME, ".cache/stile/minilm-sst2-elastic")
SHARDS = 12  # one head + d_ff/12 FFN neurons per shard (convert's default for MiniLM)


def parse_args():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--base", default=DEFAULT_BASE, help="the sentence-transformers MiniLM directory")
    p.add_argument("--data", default=os.environ.get("STILE_SST2_DIR", "/work/shared/data/sst2"))
    p.add_argument("--out", default=DEFAULT_OUT)
    p.add_argument("--seed", type=int, default=20261124)
    # One thread: on this 2-core machine shared with compiler jobs, 2 OpenMP threads measured 4.5 to
    # 30 s per teacher step (spin-waits behind a descheduled thread), 1 thread 0.42 s.
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--head", choices=("mean", "bert"), default="mean",
                   help="the classifier: linear on the normalized mean (mean) or BertForSequenceClassification's (bert)")
    p.add_argument("--teacher-steps", type=int, default=1100)
    p.add_argument("--teacher-lr", type=float, default=1e-4)
    p.add_argument("--head-lr", type=float, default=3e-3)
    p.add_argument("--importance-rows", type=int, default=2048)
    p.add_argument("--elastic-steps", type=int, default=1000)
    p.add_argument("--elastic-lr", type=float, default=5e-5)
    p.add_argument("--sub-shapes", type=int, default=3, help="random n x m submodels per elastic step")
    p.add_argument("--checkpoint-minutes", type=float, default=4.0)
    p.add_argument("--log-every", type=int, default=50)
    p.add_argument("--eval-shapes", default="all",
                   help="'corners' (6x12, 3x6, 1x1 on dev) or 'all' (every n x m; slow on 2 cores: stile's tools measure it)")
    p.add_argument("--short", action="store_true", help="smoke test: 12 + 12 steps of 16 rows, small subsets")
    p.add_argument("--measure-steps", type=int, default=0,
                   help="time this many teacher and elastic steps, print the per-step times, and exit")
    a = p.parse_args()
    if a.short:
        a.teacher_steps, a.elastic_steps, a.importance_rows, a.batch = 12, 12, 32, 16
        a.checkpoint_minutes, a.log_every, a.eval_shapes = 0.2, 4, "corners"
    return a


# ---------------------------------------------------------------------------------------------
# The model: BERT with elastic depth n and width m, written out so a submodel costs n*m/72 of the
# full one (weights are sliced, not masked), and so it mirrors the engine's shard cut exactly.
# ---------------------------------------------------------------------------------------------

def build(torch):
    nn = torch.nn
    F = torch.nn.functional

    class ElasticBert(nn.Module):
        def __init__(self, bert, num_labels=2):
            super().__init__()
            self.bert = bert
            self.cls_head = bert.pooler is not None  # BertForSequenceClassification's head: pooler on [CLS]
            c = bert.config
            self.L, self.H, self.d, self.dff = c.num_hidden_layers, c.num_attention_heads, c.hidden_size, c.intermediate_size
            self.hd = self.d // self.H
            self.eps = c.layer_norm_eps
            self.classifier = nn.Linear(self.d, num_labels)
            nn.init.zeros_(self.classifier.weight)
            nn.init.zeros_(self.classifier.bias)

        def forward(self, ids, mask, n=None, m=None, head_mask=None, neuron_mask=None, dropout=0.0):
            n = self.L if n is None else n
            m = SHARDS if m is None else m
            B, T = ids.shape
            emb = self.bert.embeddings
            pos = torch.arange(T, device=ids.device).unsqueeze(0)
            x = emb.word_embeddings(ids) + emb.position_embeddings(pos) + emb.token_type_embeddings(torch.zeros_like(ids))
            x = F.layer_norm(x, (self.d,), emb.LayerNorm.weight, emb.LayerNorm.bias, self.eps)
            x = F.dropout(x, dropout, self.training)
            bias = (1.0 - mask[:, None, None, :].to(x.dtype)) * -1e9
            heads = m * self.H // SHARDS
            width = heads * self.hd
            neurons = m * self.dff // SHARDS
            for l in range(n):
                lay = self.bert.encoder.layer[l]
                at = lay.attention
                q = F.linear(x, at.self.query.weight[:width], at.self.query.bias[:width])
                k = F.linear(x, at.self.key.weight[:width], at.self.key.bias[:width])
                v = F.linear(x, at.self.value.weight[:width], at.self.value.bias[:width])
                q, k, v = (t.view(B, T, heads, self.hd).transpose(1, 2) for t in (q, k, v))
                s = (q @ k.transpose(-1, -2)) / math.sqrt(self.hd) + bias
                p = F.dropout(torch.softmax(s, dim=-1), dropout, self.training)
                ctx = p @ v  # B, heads, T, hd
                if head_mask is not None:
                    ctx = ctx * head_mask[l, :heads].view(1, heads, 1, 1)
                ctx = ctx.transpose(1, 2).reshape(B, T, width)
                a = F.linear(ctx, at.output.dense.weight[:, :width], at.output.dense.bias)
                x = F.layer_norm(F.dropout(a, dropout, self.training) + x, (self.d,),
                                 at.output.LayerNorm.weight, at.output.LayerNorm.bias, self.eps)
                h = F.gelu(F.linear(x, lay.intermediate.dense.weight[:neurons], lay.intermediate.dense.bias[:neurons]))
                if neuron_mask is not None:
                    h = h * neuron_mask[l, :neurons]
                o = F.linear(h, lay.output.dense.weight[:, :neurons], lay.output.dense.bias)
                x = F.layer_norm(F.dropout(o, dropout, self.training) + x, (self.d,),
                                 lay.output.LayerNorm.weight, lay.output.LayerNorm.bias, self.eps)
            if self.cls_head:
                pooled = torch.tanh(self.bert.pooler.dense(x[:, 0]))
                return self.classifier(F.dropout(pooled, dropout, self.training))
            mf = mask.unsqueeze(-1).to(x.dtype)
            pooled = (x * mf).sum(1) / mf.sum(1).clamp(min=1e-9)
            pooled = F.normalize(pooled, p=2, dim=-1, eps=1e-12)
            return self.classifier(pooled)

    return ElasticBert


def reorder_(torch, model, head_imp, neuron_imp):
    """Permutes every layer's heads and FFN neurons so the most important come first (in place)."""
    hd = model.hd
    with torch.no_grad():
        for l, lay in enumerate(model.bert.encoder.layer):
            ho = torch.argsort(head_imp[l], descending=True)
            rows = torch.cat([torch.arange(h * hd, (h + 1) * hd) for h in ho.tolist()])
            at = lay.attention
            for lin in (at.self.query, at.self.key, at.self.value):
                lin.weight.copy_(lin.weight[rows])
                lin.bias.copy_(lin.bias[rows])
            at.output.dense.weight.copy_(at.output.dense.weight[:, rows])
            no = torch.argsort(neuron_imp[l], descending=True)
            lay.intermediate.dense.weight.copy_(lay.intermediate.dense.weight[no])
            lay.intermediate.dense.bias.copy_(lay.intermediate.dense.bias[no])
            lay.output.dense.weight.copy_(lay.output.dense.weight[:, no])


# ---------------------------------------------------------------------------------------------
# Data: pre-tokenized rows, length-bucketed batches (SST-2's phrases are short: padding to the
# batch's own length, with batches of similar lengths, is most of the speed on 2 cores).
# ---------------------------------------------------------------------------------------------

def tokenize(tokenizer, sentences, max_len=64):
    return [tokenizer(s, truncation=True, max_length=max_len)["input_ids"] for s in sentences]


def bucketed_batches(rng, indices, lengths, batch):
    idx = list(indices)
    rng.shuffle(idx)
    chunk = batch * 50
    out = []
    for c in range(0, len(idx), chunk):
        part = sorted(idx[c:c + chunk], key=lambda i: lengths[i])
        out += [part[b:b + batch] for b in range(0, len(part), batch)]
    rng.shuffle(out)
    return out


def collate(torch, ids_list, rows):
    T = max(len(ids_list[i]) for i in rows)
    ids = torch.zeros(len(rows), T, dtype=torch.long)
    mask = torch.zeros(len(rows), T, dtype=torch.long)
    for r, i in enumerate(rows):
        t = ids_list[i]
        ids[r, :len(t)] = torch.tensor(t)
        mask[r, :len(t)] = 1
    return ids, mask


def evaluate(torch, model, ids_list, labels, shapes, batch=128):
    """Accuracy (%) of each (n, m) shape on the rows."""
    model.eval()
    order = sorted(range(len(ids_list)), key=lambda i: len(ids_list[i]))
    batches = [order[b:b + batch] for b in range(0, len(order), batch)]
    cols = [collate(torch, ids_list, rows) for rows in batches]
    out = {}
    with torch.no_grad():
        for n, m in shapes:
            correct = 0
            for rows, (ids, mask) in zip(batches, cols):
                pred = model(ids, mask, n=n, m=m).argmax(-1)
                correct += sum(int(pred[r] == labels[i]) for r, i in enumerate(rows))
            out[f"{n}x{m}"] = 100.0 * correct / len(ids_list)
    model.train()
    return out


def main():
    a = parse_args()
    import torch
    from tqdm import tqdm
    from transformers import AutoTokenizer, BertModel
    from safetensors.torch import save_file

    torch.set_num_threads(a.threads)
    torch.manual_seed(a.seed)
    ElasticBert = build(torch)
    F = torch.nn.functional
    work = os.path.join(a.out, ".work")
    os.makedirs(work, exist_ok=True)
    state_path = os.path.join(work, "state.pt")
    started = time.time()

    # The split: train.tsv less the calibration rows (held out for the planner), as the C++ tools.
    sentences, labels = sst2_split.read_tsv(os.path.join(a.data, "train.tsv"))
    head_rows, cal_rows, rest_rows = sst2_split.split_sst2(len(sentences))
    fit_rows = sorted(head_rows + rest_rows)
    dev_s, dev_y = sst2_split.read_tsv(os.path.join(a.data, "dev.tsv"))
    tokenizer = AutoTokenizer.from_pretrained(a.base)
    print(f"finetune_elastic: {len(fit_rows)} fit rows (train.tsv {len(sentences)} less {len(cal_rows)} calibration "
          f"rows, split digest {sst2_split.digest(len(sentences))}); dev {len(dev_s)} rows (report only)", flush=True)
    t0 = time.time()
    ids_all = tokenize(tokenizer, sentences)
    dev_ids = tokenize(tokenizer, dev_s)
    lengths = [len(t) for t in ids_all]
    print(f"tokenized in {time.time() - t0:.1f} s; mean length {sum(lengths[i] for i in fit_rows) / len(fit_rows):.1f} "
          f"tokens", flush=True)
    if a.short:
        fit_rows = fit_rows[:2000]
        dev_ids, dev_y = dev_ids[:128], dev_y[:128]

    model = ElasticBert(BertModel.from_pretrained(a.base, add_pooling_layer=a.head == "bert"))
    # The word-embedding table (11.7M of the 22.7M parameters) stays as pre-trained: its Adam state
    # and dense gradient would cost as much as the encoder's on 2 cores, and SST-2 sees few tokens.
    model.bert.embeddings.word_embeddings.weight.requires_grad_(False)
    model.train()
    st = {"phase": "teacher", "step": 0, "step_seconds": {"teacher": 0.0, "importance": 0.0, "elastic": 0.0,
                                                          },
          "wall_started": started, "resumes": 0, "acc": {}}
    opt = None

    def make_opt(lr_body, lr_head, total):
        body = [p for n_, p in model.named_parameters() if not n_.startswith("classifier") and p.requires_grad]
        o = torch.optim.AdamW([{"params": body, "lr": lr_body}, {"params": model.classifier.parameters(),
                                                                  "lr": lr_head}], weight_decay=0.01)
        warm = max(1, total // 10)
        sch = torch.optim.lr_scheduler.LambdaLR(o, lambda s: min(1.0, (s + 1) / warm) * max(0.0, (total - s) / total))
        return o, sch

    teacher_logits = None
    if os.path.exists(state_path):
        ck = torch.load(state_path, weights_only=False)
        model.load_state_dict(ck["model"])
        st = ck["st"]
        st["resumes"] += 1
        teacher_logits = ck.get("teacher_logits")
        print(f"resumed from {state_path}: phase {st['phase']}, step {st['step']}", flush=True)
    else:
        ck = None

    last_save = time.time()

    def save(opt_, sch_):
        nonlocal last_save
        tmp = state_path + ".tmp"
        torch.save({"model": model.state_dict(), "st": st, "opt": opt_.state_dict() if opt_ else None,
                    "sch": sch_.state_dict() if sch_ else None, "teacher_logits": teacher_logits,  # the teacher's state dict
                   
                    "rng": random.getstate(), "torch_rng": torch.get_rng_state()}, tmp)
        os.replace(tmp, state_path)
        last_save = time.time()

    def run_phase(name, steps, lr_body, lr_head, loss_fn):
        nonlocal ck
        opt_, sch_ = make_opt(lr_body, lr_head, steps)
        rng = random.Random(a.seed + (1 if name == "teacher" else 2))
        if ck is not None and ck.get("opt") is not None and st["phase"] == name:
            opt_.load_state_dict(ck["opt"])
            sch_.load_state_dict(ck["sch"])
            random.setstate(ck["rng"])
            torch.set_rng_state(ck["torch_rng"])
        ck = None
        # The batch order is a function of (seed, epoch), so a resumed run sees the same batches.
        step = st["step"]
        epoch_batches, epoch = [], -1
        bar = tqdm(total=steps, initial=step, desc=name, mininterval=10, file=sys.stdout)
        run_loss = 0.0
        while step < steps:
            per_epoch = math.ceil(len(fit_rows) / a.batch)
            if step // per_epoch != epoch:
                epoch = step // per_epoch
                erng = random.Random(a.seed * 1000 + epoch + (0 if name == "teacher" else 500))
                epoch_batches = bucketed_batches(erng, fit_rows, lengths, a.batch)
            rows = epoch_batches[step % per_epoch]
            ids, mask = collate(torch, ids_all, rows)
            t = time.time()
            loss = loss_fn(ids, mask, rows, rng)
            opt_.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt_.step()
            sch_.step()
            st["step_seconds"][name] += time.time() - t
            step += 1
            st["step"] = step
            run_loss += loss.item()
            bar.update(1)
            if step % a.log_every == 0:
                bar.write(f"{name} step {step}/{steps} loss {run_loss / a.log_every:.4f} "
                          f"({st['step_seconds'][name] / step:.3f} s/step)")
                run_loss = 0.0
            if time.time() - last_save > a.checkpoint_minutes * 60:
                save(opt_, sch_)
        bar.close()
        return opt_, sch_

    labels_t = torch.tensor(labels)

    def teacher_loss(ids, mask, rows, rng):
        return F.cross_entropy(model(ids, mask, dropout=0.1), labels_t[rows])

    # 1. The teacher.
    if a.measure_steps:
        st["step"] = 0
        a.teacher_steps = a.measure_steps
    if st["phase"] == "teacher":
        run_phase("teacher", a.teacher_steps, a.teacher_lr, a.head_lr, teacher_loss)
        if a.measure_steps:
            print(f"measured: teacher {st['step_seconds']['teacher'] / a.measure_steps:.3f} s/step", flush=True)
        st["phase"], st["step"] = "importance", 0
        save(None, None)

    # 2. Importance and reordering.
    if st["phase"] == "importance":
        t = time.time()
        model.eval()
        head_mask = torch.ones(model.L, model.H, requires_grad=True)
        neuron_mask = torch.ones(model.L, model.dff, requires_grad=True)
        head_imp = torch.zeros(model.L, model.H)
        neuron_imp = torch.zeros(model.L, model.dff)
        rng = random.Random(a.seed + 7)
        imp_rows = rng.sample(fit_rows, min(a.importance_rows, len(fit_rows)))
        for b in tqdm(range(0, len(imp_rows), a.batch), desc="importance", mininterval=10, file=sys.stdout):
            rows = imp_rows[b:b + a.batch]
            ids, mask = collate(torch, ids_all, rows)
            loss = F.cross_entropy(model(ids, mask, head_mask=head_mask, neuron_mask=neuron_mask), labels_t[rows])
            gh, gn = torch.autograd.grad(loss, [head_mask, neuron_mask])
            head_imp += gh.abs()
            neuron_imp += gn.abs()
        model.train()
        reorder_(torch, model, head_imp, neuron_imp)
        st["head_importance"] = head_imp.tolist()
        st["step_seconds"]["importance"] = time.time() - t
        shapes = [(6, 12), (3, 6), (1, 1)]
        st["acc"]["teacher_dev"] = evaluate(torch, model, dev_ids, dev_y, shapes)
        print(f"teacher (reordered) dev accuracy: {st['acc']['teacher_dev']}", flush=True)
        st["phase"], st["step"] = "cache", 0
        save(None, None)

    all_shapes = [(n, m) for n in range(1, model.L + 1) for m in range(1, SHARDS + 1)]
    eval_shapes = all_shapes if a.eval_shapes == "all" else [(6, 12), (3, 6), (1, 1)]
    if st["phase"] == "cache":
        if a.eval_shapes == "all" and "teacher_dev_all" not in st["acc"]:
            st["acc"]["teacher_dev_all"] = evaluate(torch, model, dev_ids, dev_y, eval_shapes)
        # The teacher is the reordered full model, frozen; its logits are computed per batch (a
        # forward pass over all 64k rows up front would cost more than the steps that use them).
        teacher_logits = {k: v.detach().clone() for k, v in model.state_dict().items()}
        st["phase"], st["step"] = "elastic", 0
        save(None, None)

    teacher = None
    if teacher_logits is not None:
        import copy
        teacher = copy.deepcopy(model)
        teacher.load_state_dict(teacher_logits)
        teacher.eval()
        for p_ in teacher.parameters():
            p_.requires_grad_(False)

    # 3. Elastic distillation: the full shape + random n x m submodels, soft CE to the teacher.
    def elastic_loss(ids, mask, rows, rng):
        with torch.no_grad():
            target = F.softmax(teacher(ids, mask), dim=-1)
        shapes = [(model.L, SHARDS)] + [(rng.randint(1, model.L), rng.randint(1, SHARDS)) for _ in range(a.sub_shapes)]
        loss = 0.0
        for n, m in shapes:
            logp = F.log_softmax(model(ids, mask, n=n, m=m, dropout=0.1), dim=-1)
            loss = loss + -(target * logp).sum(-1).mean()
        return loss / len(shapes)

    if a.measure_steps:
        st["step"] = 0
        if teacher is None:
            import copy
            teacher = copy.deepcopy(model).eval()
        a.elastic_steps = a.measure_steps
        st["phase"] = "elastic"
    if st["phase"] == "elastic":
        run_phase("elastic", a.elastic_steps, a.elastic_lr, a.head_lr / 10, elastic_loss)
        if a.measure_steps:
            print(f"measured: elastic {st['step_seconds']['elastic'] / a.measure_steps:.3f} s/step", flush=True)
            shutil.rmtree(work)
            return 0
        st["phase"], st["step"] = "eval", 0
        save(None, None)

    if st["phase"] == "eval":
        st["acc"]["elastic_dev_all"] = evaluate(torch, model, dev_ids, dev_y, eval_shapes)
        st["phase"] = "write"
        save(None, None)

    # The output directory, written beside and renamed into place.
    tmp = a.out.rstrip("/") + ".writing"
    shutil.rmtree(tmp, ignore_errors=True)
    os.makedirs(tmp)
    bert_head = a.head == "bert"
    prefix = "bert." if bert_head else ""  # BertForSequenceClassification's base_model_prefix
    tensors = {prefix + k: v.detach().contiguous() for k, v in model.bert.state_dict().items()
               if "position_ids" not in k}
    tensors["classifier.weight"] = model.classifier.weight.detach().contiguous()
    tensors["classifier.bias"] = model.classifier.bias.detach().contiguous()
    save_file(tensors, os.path.join(tmp, "model.safetensors"), metadata={"format": "pt"})
    with open(os.path.join(a.base, "config.json")) as f:
        config = json.load(f)
    config.update({"num_labels": 2, "id2label": {"0": "negative", "1": "positive"},
                   "label2id": {"negative": 0, "positive": 1},
                   "stile_shard_order": "heads and FFN neurons sorted by importance: shards 0..m-1 are the best m"})
    if bert_head:
        config.update({"architectures": ["BertForSequenceClassification"],
                       "problem_type": "single_label_classification"})
    else:
        config.update({"architectures": ["BertModel"],
                       "stile_classifier": "linear on the mean-pooled, L2-normalized embedding "
                                           "(classifier.weight, classifier.bias)"})
    with open(os.path.join(tmp, "config.json"), "w") as f:
        json.dump(config, f, indent=2)
    st_files = () if bert_head else ("modules.json", "sentence_bert_config.json", "config_sentence_transformers.json")
    for name in ("vocab.txt", "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json") + st_files:
        if os.path.exists(os.path.join(a.base, name)):
            shutil.copy(os.path.join(a.base, name), tmp)
    for d in () if bert_head else ("1_Pooling", "2_Normalize"):
        if os.path.isdir(os.path.join(a.base, d)):
            shutil.copytree(os.path.join(a.base, d), os.path.join(tmp, d))
        else:
            os.makedirs(os.path.join(tmp, d), exist_ok=True)
    record = {"seed": a.seed, "split": {"seed": sst2_split.DEFAULT_SEED, "train": sst2_split.DEFAULT_TRAIN,
                                        "calibration": sst2_split.DEFAULT_CALIBRATION, "rows": len(sentences),
                                        "digest": sst2_split.digest(len(sentences))},
              "fit_rows": len(fit_rows), "short": a.short, "args": vars(a), "step_seconds": st["step_seconds"],
              "wall_seconds_this_process": time.time() - started, "resumes": st["resumes"],
              "accuracy_percent": st["acc"], "head_importance": st.get("head_importance"),
              "command": " ".join(sys.argv)}
    with open(os.path.join(tmp, "training.json"), "w") as f:
        json.dump(record, f, indent=1)
    shutil.rmtree(work, ignore_errors=True)
    keep = a.out.rstrip("/") + ".old"
    if os.path.exists(a.out):
        shutil.rmtree(keep, ignore_errors=True)
        os.replace(a.out, keep)
    os.replace(tmp, a.out)
    shutil.rmtree(keep, ignore_errors=True)
    acc = st["acc"]
    print(f"wrote {a.out}; step time {sum(st['step_seconds'].values()):.0f} s; dev 6x12 "
          f"teacher {acc['teacher_dev']['6x12']:.2f}% -> elastic {acc['elastic_dev_all']['6x12']:.2f}%; "
          f"3x6 {acc['teacher_dev']['3x6']:.2f} -> {acc['elastic_dev_all']['3x6']:.2f}; "
          f"1x1 {acc['teacher_dev']['1x1']:.2f} -> {acc['elastic_dev_all']['1x1']:.2f}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
