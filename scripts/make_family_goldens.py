#!/usr/bin/env python3
"""Small random-weight encoders of each family stile runs, and transformers' last hidden states
for them: the golden files of tests/model/test_families.cpp (committed, so the test needs no torch).

Run with the reference venv (bench/peers/README.md):
    HF_HUB_OFFLINE=1 .venv-ref/bin/python scripts/make_family_goldens.py [--out tests/model/data/families]

One directory per family, each a complete Hugging Face model directory plus its goldens:
    config.json, model.safetensors     save_pretrained of a model made by from_config
    tokenizer.json                     a copy of tests/tokenizer/data/json/<name>.tokenizer.json
    golden.json                        per case: text, ids, type_ids, tokens, first row in golden.f32
    golden.f32                         the last hidden states, [tokens x hidden] float32 little-endian,
                                       the cases' rows back to back

Families: bert, distilbert, electra (discriminator, embedding_size 32 != hidden 64) on the
bert_wordpiece tokenizer; roberta, camembert, mpnet on roberta_bpe; xlm-roberta on xlm_roberta. Every
model has 2 layers, hidden 64, 4 heads, FFN 128, the tokenizer's vocabulary size. MPNet (its
relative_attention_bias drawn N(0, 0.5)) also runs one long case of 120 SST-2 words (177 tokens;
256 positions). ModernBERT: 3 layers (global attention in layers 0 and 2, a local window of 16
tokens in layer 1), no biases (norm_bias, attention_bias, mlp_bias false), GEGLU FFN, rotary
positions, on bert_wordpiece, with the same long case (173 tokens). deberta-v2: DeBERTa-v3's shape
(relative attention, c2p and p2c, shared keys, LayerNorm'd relative embeddings N(0, 0.5), no
absolute positions, no token types, LayerNorm eps 1e-7) with 32 position buckets over 64 relative
positions, on deberta_v3, with the long case (172 tokens). Some are saved from a model with
a head, so their tensors carry the base model's prefix (distilbert., electra., roberta., mpnet.,
model., deberta.): the golden is the base model's output all the same.

The weights: from_config's model with every parameter redrawn (seeded) so the layers do visible
work (matrices N(0, 0.1), embeddings N(0, 0.5), biases N(0, 0.05), LayerNorm gamma 1 + N(0, 0.1)
and beta N(0, 0.1)), then rounded to fp16 and saved as F16 (half the bytes; the fp32 reference runs
on exactly the values saved). Word-embedding rows of tokens no case uses are zero, so the files
compress well in git; no case reads them.

The reference: transformers' model in eval mode, fp32, eager attention, one thread, one sequence
at a time without padding, token ids from the tokenizers library (add_special_tokens, no
truncation); DistilBERT takes no token types.
"""
import argparse
import json
import os
import shutil

os.environ.setdefault("HF_HUB_OFFLINE", "1")
import numpy as np  # noqa: E402
import tokenizers  # noqa: E402
import torch  # noqa: E402
import transformers  # noqa: E402
from transformers import (BertConfig, BertModel, CamembertConfig, CamembertModel, DebertaV2Config,  # noqa: E402
                          DebertaV2ForSequenceClassification, DistilBertConfig,
                          DistilBertForSequenceClassification, ElectraConfig, ElectraForPreTraining,
                          ModernBertConfig, ModernBertForSequenceClassification, MPNetConfig,
                          MPNetForSequenceClassification, RobertaConfig, RobertaModel,
                          XLMRobertaConfig, XLMRobertaForSequenceClassification)

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
TOKENIZERS = os.path.join(ROOT, "tests/tokenizer/data/json")
SST2_TRAIN = os.path.join(ROOT, "..", "shared/data/sst2/train.tsv")

# The hard strings: accents, emoji and a dash; the specials of both vocabularies written in the text
# (matched as special tokens: RoBERTa's <pad> inside a sequence takes position padding_idx); runs of
# whitespace, case and digits.
HARD = [
    "Café naïve — déjà vu! 😀 ŒUVRE",
    "the <pad> film [PAD] is <s> fine [SEP] </s> <unk> [UNK]",
    "  Multiple   spaces\tand\nnewlines, UPPER lower 12345 ... !!!",
]
SST2_CASES = 5  # the first sentences of the train split of at most 40 words
# The families whose attention has a position term of its own (MPNet's relative buckets,
# ModernBERT's rotary positions and sliding window) take one long case more: the first SST-2
# sentences joined to LONG_WORDS words (about 150 tokens), so that relative distances reach past
# every bucket boundary (8, 16, 32, 64, 128) and far past ModernBERT's window.
LONG_WORDS = 120
LONG_FAMILIES = {"mpnet", "modernbert", "deberta-v2"}
LONG_MAX_POSITIONS = 256  # their positions (MPNet's table: 2 rows more, its offset)
NO_TOKEN_TYPES = {"distilbert", "mpnet", "modernbert", "deberta-v2"}  # no token_type_ids (DeBERTa: type_vocab_size 0)
# ModernBERT: 3 layers, global attention every 2nd (layers 0 and 2; layer 1 local), a window of 16
# tokens (8 each side), shorter than most cases.
MODERNBERT = dict(layers=3, local_attention=16, global_attn_every_n_layers=2)
# DeBERTa-v3's shape (relative attention, p2c and c2p, shared keys, LayerNorm'd relative embeddings,
# no absolute positions, no token types) with 32 position buckets over 64 relative positions, so
# that the long case's distances fall in the log-spaced buckets (beyond 16) and past the last one.
DEBERTA = dict(position_buckets=32, max_relative_positions=64)

SHAPE = dict(layers=2, hidden=64, heads=4, intermediate=128)
MAX_POSITIONS = 128  # tokens a sequence may have (RoBERTa's table has 2 more rows: the offset)


def family_models(vocab):
    """(dir name, tokenizer, make the model, take its base model) per family."""
    L, H, A, F = SHAPE["layers"], SHAPE["hidden"], SHAPE["heads"], SHAPE["intermediate"]
    common = dict(num_hidden_layers=L, hidden_size=H, num_attention_heads=A, intermediate_size=F, hidden_act="gelu",
                  layer_norm_eps=1e-12, attn_implementation="eager")
    roberta = dict(common, max_position_embeddings=MAX_POSITIONS + 2, type_vocab_size=1, pad_token_id=1,
                   bos_token_id=0, eos_token_id=2)
    return [
        ("bert", "bert_wordpiece",
         lambda: BertModel(BertConfig(vocab_size=vocab["bert_wordpiece"], max_position_embeddings=MAX_POSITIONS,
                                      type_vocab_size=2, pad_token_id=0, **common)),
         lambda m: m),
        ("distilbert", "bert_wordpiece",
         lambda: DistilBertForSequenceClassification(DistilBertConfig(
             vocab_size=vocab["bert_wordpiece"], dim=H, n_layers=L, n_heads=A, hidden_dim=F, activation="gelu",
             max_position_embeddings=MAX_POSITIONS, pad_token_id=0, attn_implementation="eager")),
         lambda m: m.distilbert),
        ("electra", "bert_wordpiece",
         lambda: ElectraForPreTraining(ElectraConfig(vocab_size=vocab["bert_wordpiece"], embedding_size=32,
                                                     max_position_embeddings=MAX_POSITIONS, type_vocab_size=2,
                                                     pad_token_id=0, **common)),
         lambda m: m.electra),
        ("roberta", "roberta_bpe",
         lambda: RobertaModel(RobertaConfig(vocab_size=vocab["roberta_bpe"], **roberta), add_pooling_layer=False),
         lambda m: m),
        ("camembert", "roberta_bpe",
         lambda: CamembertModel(CamembertConfig(vocab_size=vocab["roberta_bpe"], **roberta), add_pooling_layer=False),
         lambda m: m),
        ("xlm-roberta", "xlm_roberta",
         lambda: XLMRobertaForSequenceClassification(XLMRobertaConfig(vocab_size=vocab["xlm_roberta"], **roberta)),
         lambda m: m.roberta),
        ("mpnet", "roberta_bpe",
         lambda: MPNetForSequenceClassification(MPNetConfig(
             vocab_size=vocab["roberta_bpe"], max_position_embeddings=LONG_MAX_POSITIONS + 2,
             relative_attention_num_buckets=32, pad_token_id=1, bos_token_id=0, eos_token_id=2,
             **common)),
         lambda m: m.mpnet),
        ("modernbert", "bert_wordpiece",
         lambda: ModernBertForSequenceClassification(ModernBertConfig(
             vocab_size=vocab["bert_wordpiece"], hidden_size=H, intermediate_size=F,
             num_hidden_layers=MODERNBERT["layers"], num_attention_heads=A, hidden_activation="gelu",
             max_position_embeddings=LONG_MAX_POSITIONS, norm_eps=1e-5, norm_bias=False, attention_bias=False,
             mlp_bias=False, global_attn_every_n_layers=MODERNBERT["global_attn_every_n_layers"],
             local_attention=MODERNBERT["local_attention"], global_rope_theta=160000.0, local_rope_theta=10000.0,
             pad_token_id=0, bos_token_id=2, eos_token_id=3, cls_token_id=2, sep_token_id=3,
             attn_implementation="eager")),
         lambda m: m.model),
        ("deberta-v2", "deberta_v3",
         lambda: DebertaV2ForSequenceClassification(DebertaV2Config(
             vocab_size=vocab["deberta_v3"], max_position_embeddings=LONG_MAX_POSITIONS, type_vocab_size=0,
             position_biased_input=False, relative_attention=True, pos_att_type=["p2c", "c2p"],
             share_att_key=True, norm_rel_ebd="layer_norm", pad_token_id=0, **DEBERTA,
             **dict(common, layer_norm_eps=1e-7))),
         lambda m: m.deberta),
    ]


def sst2_sentences():
    out = []
    with open(SST2_TRAIN, encoding="utf-8") as f:
        next(f)  # header
        for line in f:
            sentence = line.split("\t")[0]
            if len(sentence.split()) <= 40:
                out.append(sentence)
            if len(out) == SST2_CASES:
                break
    return out


def long_text():
    words = []
    with open(SST2_TRAIN, encoding="utf-8") as f:
        next(f)
        for line in f:
            words += line.split("\t")[0].split()
            if len(words) >= LONG_WORDS:
                return " ".join(words[:LONG_WORDS])
    raise RuntimeError("SST-2 too short")


def redraw(model, seed):
    """Every parameter drawn again (seeded), then rounded to fp16."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in sorted(model.named_parameters()):
            norm = "LayerNorm" in name or "layer_norm" in name or name.split(".")[-2].endswith("norm")
            if norm and name.endswith("weight"):
                v = 1.0 + 0.1 * torch.randn(p.shape, generator=g)
            elif norm:
                v = 0.1 * torch.randn(p.shape, generator=g)
            elif name.endswith("bias"):
                v = 0.05 * torch.randn(p.shape, generator=g)
            elif "relative_attention_bias" in name:  # MPNet's: large enough to move the softmax
                v = 0.5 * torch.randn(p.shape, generator=g)
            elif "rel_embeddings" in name:  # DeBERTa's: LayerNorm'd before use, any scale does
                v = 0.5 * torch.randn(p.shape, generator=g)
            elif "embeddings" in name and p.dim() == 2 and "project" not in name:
                v = 0.5 * torch.randn(p.shape, generator=g)
            else:
                v = 0.1 * torch.randn(p.shape, generator=g)
            p.copy_(v.half().float())


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", default=os.path.join(ROOT, "tests/model/data/families"))
    p.add_argument("--seed", type=int, default=31)
    a = p.parse_args()
    torch.set_num_threads(1)
    texts = sst2_sentences() + HARD
    toks = {n: tokenizers.Tokenizer.from_file(os.path.join(TOKENIZERS, n + ".tokenizer.json"))
            for n in ("bert_wordpiece", "roberta_bpe", "xlm_roberta", "deberta_v3")}
    vocab = {n: t.get_vocab_size() for n, t in toks.items()}
    for index, (family, tok_name, make, base_of) in enumerate(family_models(vocab)):
        out = os.path.join(a.out, family)
        if os.path.isdir(out):
            shutil.rmtree(out)
        os.makedirs(out)
        tok = toks[tok_name]
        family_texts = texts + ([long_text()] if family in LONG_FAMILIES else [])
        max_positions = LONG_MAX_POSITIONS if family in LONG_FAMILIES else MAX_POSITIONS
        encodings = [tok.encode(t) for t in family_texts]
        torch.manual_seed(a.seed + index)
        model = make().eval()
        redraw(model, a.seed + index)
        base = base_of(model)
        used = sorted({i for e in encodings for i in e.ids})
        with torch.no_grad():
            table = base.get_input_embeddings().weight
            keep = torch.zeros(table.shape[0], dtype=torch.bool)
            keep[used] = True
            table[~keep] = 0.0
        cases, rows = [], []
        first = 0
        for text, e in zip(family_texts, encodings):
            assert len(e.ids) <= max_positions, (family, text)
            ids = torch.tensor([e.ids])
            kwargs = dict(input_ids=ids, attention_mask=torch.ones_like(ids))
            if family not in NO_TOKEN_TYPES:
                kwargs["token_type_ids"] = torch.tensor([e.type_ids])
            with torch.no_grad():
                hidden = base(**kwargs).last_hidden_state[0].float().numpy()
            rows.append(hidden.astype("<f4"))
            cases.append({"text": text, "ids": e.ids, "type_ids": e.type_ids, "tokens": len(e.ids),
                          "first_row": first})
            first += len(e.ids)
        model.half().save_pretrained(out)
        shutil.copyfile(os.path.join(TOKENIZERS, tok_name + ".tokenizer.json"), os.path.join(out, "tokenizer.json"))
        hidden = np.concatenate(rows)
        hidden.tofile(os.path.join(out, "golden.f32"))
        head = {"source": "scripts/make_family_goldens.py", "family": family, "model_class": type(model).__name__,
                "tokenizer": tok_name,
                "reference": {"torch": torch.__version__, "transformers": transformers.__version__,
                              "tokenizers": tokenizers.__version__, "attention": "eager", "threads": 1},
                "hidden": SHAPE["hidden"], "rows": int(hidden.shape[0]), "max_abs": float(np.abs(hidden).max())}
        with open(os.path.join(out, "golden.json"), "w", encoding="utf-8") as f:  # a case a line
            f.write(json.dumps(head, ensure_ascii=False)[:-1] + ', "cases": [\n')
            f.write(",\n".join(json.dumps(c, ensure_ascii=False) for c in cases) + "\n]}\n")
        print(f"{family}: {len(cases)} cases, {hidden.shape[0]} rows, max |h| {np.abs(hidden).max():.3f}")


if __name__ == "__main__":
    main()
