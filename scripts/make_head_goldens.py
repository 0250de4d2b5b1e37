#!/usr/bin/env python3
"""Small random-weight encoders with task heads (sequence classification, cross-encoder, token
classification, SPLADE) and the reference outputs of transformers' pipelines and
sentence-transformers for them: the golden files of stile's head tests (committed, so the tests
need no torch).

Run with the reference venv (bench/peers/README.md):
    HF_HUB_OFFLINE=1 .venv-ref/bin/python scripts/make_head_goldens.py [--out tests/model/data/heads]

A rerun on the same library versions writes the same bytes (every draw is seeded; each case has
a seed of its own: --seed + its index).

One directory per case, each a complete Hugging Face model directory as save_pretrained (or
sentence-transformers' save) writes it, plus golden.json:
    config.json, model.safetensors     the model (F16), config with id2label/label2id/problem_type
    tokenizer.json                     a copy of tests/tokenizer/data/json/<name>.tokenizer.json
    tokenizer_config.json              tokenizer_class PreTrainedTokenizerFast, the special tokens,
                                       model_max_length 128, model_input_names
    modules.json, config_sentence_transformers.json, sentence_bert_config.json, 1_SpladePooling/
                                       what sentence-transformers' save writes (cross-encoders,
                                       SPLADE); its model card (README.md) is deleted
    golden.json                        task, library versions, the cases

The encoders: the families of scripts/make_family_goldens.py with its configurations (SHAPE: 2
layers, hidden 64, 4 heads, FFN 128; ModernBERT 3 layers with a local layer; DeBERTa-v3's shape;
ELECTRA embedding_size 32; RoBERTa's position offset; ...), except that every family here has
MAX_POSITIONS (128) positions (MPNet and the RoBERTas 2 rows more, the offset), so the long text
(make_family_goldens.long_text(), about 175 tokens) is truncated everywhere.

Cases:
  sequence classification (<Family>ForSequenceClassification), task "sequence-classification":
    bert_seqcls            3 labels negative/neutral/positive, single_label_classification
                           (also 3 text pairs, one with the long text: longest_first truncation)
    distilbert_multilabel  4 labels, multi_label_classification
    roberta_regression     1 label, regression
    xlm-roberta_seqcls     2 labels (default names LABEL_0/1), problem_type unset
    electra_seqcls         3 labels;  mpnet_seqcls 2 labels;  deberta-v2_seqcls 3 labels (ContextPooler)
    modernbert_cls         classifier_pooling cls, 2 labels
    modernbert_mean        classifier_pooling mean, 3 labels, classifier_bias, classifier_activation silu
  cross-encoders (sentence-transformers CrossEncoder over *ForSequenceClassification, 1 label),
  task "cross-encoder": bert_crossencoder, xlm-roberta_crossencoder
  token classification (<Family>ForTokenClassification, labels O B-PER I-PER B-LOC I-LOC B-ORG
  I-ORG), task "token-classification": bert_ner, distilbert_ner, roberta_ner, xlm-roberta_ner,
  electra_ner, mpnet_ner, deberta-v2_ner, modernbert_ner
  SPLADE (sentence-transformers SparseEncoder: MLMTransformer + SpladePooling max), task "splade":
  bert_splade (BertForMaskedLM), distilbert_splade (DistilBertForMaskedLM)

Texts: the family script's first SST-2 train sentences and its HARD strings, and its long text
(longer than the positions: truncated to 128 tokens). Token classification adds a sentence with
names, and runs the long text through the pipeline in overlapping windows (tokenizer
model_max_length 32 with stride 8, and 48 with stride 16). Cross-encoders: two queries, each
against the same 5 passages (one of them the long text).

The weights: from_config's model with every parameter redrawn by make_family_goldens.redraw
(seeded); the final classifier layer then drawn again larger (weight N(0, 0.5), bias N(0, 0.3)),
and its bias less the mean logits over the case's inputs (token classification: then 3.5 more on
"O", about half the tokens "O"), so that predicted labels vary across tokens and texts rather than
follow the part of the features every input shares; the masked-LM output bias N(-1, 0.3); all
rounded to fp16 and saved as F16. Word-embedding rows of tokens no case uses are zero, before the
reference runs (the masked-LM decoder is tied to them: a zero row's logit is its bias, below 0 but
for one row per SPLADE model, which is then active in every case).

The reference: each case's directory loaded back as a user would load it (fp32, eager attention,
one thread, eval mode), the tokenizer as PreTrainedTokenizerFast(tokenizer_file=...):
  sequence-classification: per case text, text_pair (or null), ids (after truncation), logits,
    and pipeline: transformers.pipeline("text-classification", top_k=None, truncation=True)'s list
    of {label, score} in the pipeline's order
  cross-encoder: per query: query, passages, ids and logits per pair (each pair alone),
    scores = CrossEncoder.predict(pairs), rank = CrossEncoder.rank(query, passages)
  token-classification: per case text, stride and model_max_length (null: none given; the
    tokenizer's 128), ids (the first window's), logits (per token; cases without windows only),
    pipeline: {strategy: pipeline("token-classification", aggregation_strategy=strategy) output}
    for none, simple, first, max, average; a strategy the pipeline refuses is {"error": message}
    (none with a stride)
  splade: per case text, ids, indices (ascending), values (the nonzero weights of
    SparseEncoder.encode), top (SparseEncoder.decode's 10 largest as [token, weight])
Floats are float32 values written as Python floats (full precision).
"""
import argparse
import copy
import json
import logging
import os
import shutil
import sys
import tempfile
import warnings

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
import numpy as np  # noqa: E402
import sentence_transformers  # noqa: E402
import tokenizers  # noqa: E402
import torch  # noqa: E402
import transformers  # noqa: E402
from safetensors import safe_open  # noqa: E402
from sentence_transformers import CrossEncoder, SparseEncoder  # noqa: E402
from sentence_transformers.sparse_encoder.modules import MLMTransformer, SpladePooling  # noqa: E402
from transformers import (AutoModelForMaskedLM, AutoModelForSequenceClassification,  # noqa: E402
                          AutoModelForTokenClassification, AutoTokenizer, PreTrainedTokenizerFast)

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import make_family_goldens as fam  # noqa: E402

ROOT = fam.ROOT
TOKENIZER_OF = {"bert": "bert_wordpiece", "distilbert": "bert_wordpiece", "electra": "bert_wordpiece",
                "modernbert": "bert_wordpiece", "roberta": "roberta_bpe", "mpnet": "roberta_bpe",
                "xlm-roberta": "xlm_roberta", "deberta-v2": "deberta_v3"}
SPECIALS = {
    "bert_wordpiece": dict(unk_token="[UNK]", cls_token="[CLS]", sep_token="[SEP]", pad_token="[PAD]",
                           mask_token="[MASK]"),
    "roberta_bpe": dict(bos_token="<s>", eos_token="</s>", unk_token="<unk>", cls_token="<s>", sep_token="</s>",
                        pad_token="<pad>", mask_token="<mask>"),
    "xlm_roberta": dict(bos_token="<s>", eos_token="</s>", unk_token="<unk>", cls_token="<s>", sep_token="</s>",
                        pad_token="<pad>", mask_token="<mask>"),
    "deberta_v3": dict(bos_token="[CLS]", eos_token="[SEP]", unk_token="[UNK]", cls_token="[CLS]", sep_token="[SEP]",
                       pad_token="[PAD]", mask_token="[MASK]"),
}
# Only BERT and ELECTRA read token types (RoBERTa's and XLM-R's table has one row; the others none).
TOKEN_TYPE_FAMILIES = {"bert", "electra"}
MODEL_MAX_LENGTH = fam.MAX_POSITIONS

NER_LABELS = ["O", "B-PER", "I-PER", "B-LOC", "I-LOC", "B-ORG", "I-ORG"]
NER_TEXT = "Angela Merkel met Barack Obama in Washington with the Brookings Institution and Siemens AG staff."
NER_WINDOWS = [(32, 8), (48, 16)]  # (tokenizer model_max_length, stride)
O_BOOST = 3.5  # added to the centered bias of "O"
STRATEGIES = ["none", "simple", "first", "max", "average"]
QUERIES = ["a film with heart , humor and a great cast", fam.HARD[0]]

SEQCLS = [  # name, family, labels (names or a count), problem_type, extra config
    ("bert_seqcls", "bert", ["negative", "neutral", "positive"], "single_label_classification", {}),
    ("distilbert_multilabel", "distilbert", ["action", "comedy", "drama", "horror"], "multi_label_classification", {}),
    ("roberta_regression", "roberta", 1, "regression", {}),
    ("xlm-roberta_seqcls", "xlm-roberta", 2, None, {}),
    ("electra_seqcls", "electra", ["entailment", "neutral", "contradiction"], None, {}),
    ("mpnet_seqcls", "mpnet", ["ham", "spam"], None, {}),
    ("deberta-v2_seqcls", "deberta-v2", ["low", "medium", "high"], None, {}),
    ("modernbert_cls", "modernbert", ["negative", "positive"], None, dict(classifier_pooling="cls")),
    ("modernbert_mean", "modernbert", ["sports", "politics", "science"], None,
     dict(classifier_pooling="mean", classifier_bias=True, classifier_activation="silu")),
]
CROSS = [("bert_crossencoder", "bert"), ("xlm-roberta_crossencoder", "xlm-roberta")]
NER = ["bert", "distilbert", "roberta", "xlm-roberta", "electra", "mpnet", "deberta-v2", "modernbert"]
SPLADE = [("bert_splade", "bert"), ("distilbert_splade", "distilbert")]


def family_configs(vocab):
    """The family script's configuration per family, with MAX_POSITIONS positions everywhere."""
    out = {}
    for family, _, make, _ in fam.family_models(vocab):
        config = copy.deepcopy(make().config)
        config.architectures = None
        offset = 2 if family in ("roberta", "xlm-roberta", "mpnet", "camembert") else 0
        config.max_position_embeddings = fam.MAX_POSITIONS + offset
        out[family] = config
    return out


def set_labels(config, labels, problem_type):
    names = [f"LABEL_{i}" for i in range(labels)] if isinstance(labels, int) else list(labels)
    config.num_labels = len(names)
    config.id2label = {i: n for i, n in enumerate(names)}
    config.label2id = {n: i for i, n in enumerate(names)}
    config.problem_type = problem_type


def final_layer(model):
    """The classifier's last Linear (a module of its own in the RoBERTa-style heads)."""
    c = model.classifier
    return c if isinstance(c, torch.nn.Linear) else c.out_proj


def draw_fp16(shape, g, std, mean=0.0):
    return (mean + std * torch.randn(shape, generator=g)).half().float()


def draw_weights(model, seed, kind):
    fam.redraw(model, seed)
    g = torch.Generator().manual_seed(seed + 100000)
    with torch.no_grad():
        if kind in ("seqcls", "ner"):
            layer = final_layer(model)
            layer.weight.copy_(draw_fp16(layer.weight.shape, g, 0.5))
            layer.bias.copy_(draw_fp16(layer.bias.shape, g, 0.3))
        else:  # masked LM: the output bias (tied to the decoder's)
            bias = model.cls.predictions.bias if hasattr(model, "cls") else model.vocab_projector.bias
            bias.copy_(draw_fp16(bias.shape, g, 0.3, mean=-1.0))


def center_bias(model, encodings, o_boost=0.0):
    """The final layer's bias less the mean logits over the case's inputs (then o_boost more on label 0),
    so that the inputs' small differences decide the labels rather than the bias and the part of the
    features that every input shares."""
    layer = final_layer(model)
    with torch.no_grad():
        logits = torch.cat([model(**e).logits.reshape(-1, layer.bias.shape[0]) for e in encodings])
        bias = layer.bias - logits.mean(0)
        bias[0] += o_boost
        layer.bias.copy_(bias.half().float())


def check_fp16(model):
    for name, p in model.named_parameters():
        assert torch.equal(p, p.half().float()), name


def zero_unused_rows(model, used):
    with torch.no_grad():
        table = model.get_input_embeddings().weight
        keep = torch.zeros(table.shape[0], dtype=torch.bool)
        keep[sorted(used)] = True
        table[~keep] = 0.0


def used_ids(tok, texts, specials_of):
    used = {i for t in texts for i in tok.encode(t).ids}
    used |= {tok.token_to_id(s) for s in specials_of.values()}
    return used


def tokenizer_config(family):
    tok_name = TOKENIZER_OF[family]
    names = ["input_ids", "token_type_ids", "attention_mask"] if family in TOKEN_TYPE_FAMILIES else \
        ["input_ids", "attention_mask"]
    return dict(tokenizer_class="PreTrainedTokenizerFast", model_max_length=MODEL_MAX_LENGTH,
                model_input_names=names, **SPECIALS[tok_name])


def write_tokenizer_files(out, family):
    shutil.copyfile(os.path.join(fam.TOKENIZERS, TOKENIZER_OF[family] + ".tokenizer.json"),
                    os.path.join(out, "tokenizer.json"))
    with open(os.path.join(out, "tokenizer_config.json"), "w", encoding="utf-8") as f:
        json.dump(tokenizer_config(family), f, indent=2, sort_keys=True)
        f.write("\n")


def hf_tokenizer(out, family, model_max_length=None):
    """PreTrainedTokenizerFast over out/tokenizer.json (out None: the source file)."""
    cfg = tokenizer_config(family)
    del cfg["tokenizer_class"]
    if model_max_length is not None:
        cfg["model_max_length"] = model_max_length
    path = os.path.join(out, "tokenizer.json") if out else \
        os.path.join(fam.TOKENIZERS, TOKENIZER_OF[family] + ".tokenizer.json")
    return PreTrainedTokenizerFast(tokenizer_file=path, **cfg)


def tidy(out):
    """No model card; every file 0644 (transformers writes model.safetensors 0600)."""
    for dirpath, _, files in os.walk(out):
        for name in files:
            if name == "README.md":
                os.remove(os.path.join(dirpath, name))
            else:
                os.chmod(os.path.join(dirpath, name), 0o644)


def check_f16(out):
    with safe_open(os.path.join(out, "model.safetensors"), "pt") as f:
        for k in f.keys():
            assert f.get_slice(k).get_dtype() == "F16", (out, k)


def check_tokenizer(out, family, texts):
    """The saved directory's tokenizer (as AutoTokenizer reads it) gives the ids ours gives."""
    ours = hf_tokenizer(out, family)
    auto = AutoTokenizer.from_pretrained(out)
    raw = tokenizers.Tokenizer.from_file(os.path.join(out, "tokenizer.json"))
    for t in texts:
        assert auto(t, truncation=True)["input_ids"] == ours(t, truncation=True)["input_ids"], (out, t)
        assert ours(t)["input_ids"] == raw.encode(t).ids, (out, t)


def f32(x):
    return float(np.float32(x))


def floats(a):
    return [float(v) for v in np.asarray(a, dtype=np.float32).reshape(-1)]


def plain(obj):
    if isinstance(obj, dict):
        return {k: plain(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [plain(v) for v in obj]
    if isinstance(obj, (np.floating, float)):
        return f32(obj)
    if isinstance(obj, (np.integer,)):
        return int(obj)
    if isinstance(obj, torch.Tensor):
        return plain(obj.tolist())
    return obj


def reference():
    return {"transformers": transformers.__version__, "sentence_transformers": sentence_transformers.__version__,
            "tokenizers": tokenizers.__version__, "torch": torch.__version__, "attention": "eager", "threads": 1,
            "dtype": "float32"}


def write_golden(out, head, cases):
    with open(os.path.join(out, "golden.json"), "w", encoding="utf-8") as f:  # a case a line
        f.write(json.dumps(head, ensure_ascii=False)[:-1] + ', "cases": [\n')
        f.write(",\n".join(json.dumps(c, ensure_ascii=False) for c in cases) + "\n]}\n")


LOAD = dict(dtype=torch.float32, attn_implementation="eager")


def seqcls_case(out, name, family, labels, problem_type, extra, configs, toks, seed, texts):
    sst2, long = texts["sst2"], texts["long"]
    singles = [(t, None) for t in sst2 + fam.HARD + [long]]
    pairs = [(sst2[0], sst2[1]), (fam.HARD[0], sst2[2]), (sst2[3], long)] if name == "bert_seqcls" else []
    inputs = singles + pairs
    config = copy.deepcopy(configs[family])
    set_labels(config, labels, problem_type)
    for k, v in extra.items():
        setattr(config, k, v)
    torch.manual_seed(seed)
    model = AutoModelForSequenceClassification.from_config(config).eval()
    draw_weights(model, seed, "seqcls")
    tok = toks[TOKENIZER_OF[family]]
    zero_unused_rows(model, used_ids(tok, [t for p in inputs for t in p if t], SPECIALS[TOKENIZER_OF[family]]))
    src = hf_tokenizer(None, family)
    center_bias(model, [src(a, b, truncation=True, return_tensors="pt") for a, b in inputs])
    check_fp16(model)
    model.half().save_pretrained(out)
    write_tokenizer_files(out, family)
    tidy(out)
    check_f16(out)
    check_tokenizer(out, family, [t for p in inputs for t in p if t])

    hf_tok = hf_tokenizer(out, family)
    pipe = transformers.pipeline("text-classification", model=out, tokenizer=hf_tok, top_k=None, truncation=True,
                                 device="cpu", model_kwargs=dict(LOAD))
    assert pipe.model.dtype == torch.float32 and not pipe.model.training
    cases = []
    for text, text_pair in inputs:
        enc = hf_tok(text, text_pair, truncation=True, return_tensors="pt")
        with torch.no_grad():
            logits = pipe.model(**enc).logits[0]
        result = pipe({"text": text, "text_pair": text_pair} if text_pair is not None else text)
        if text_pair is None:  # a str comes back wrapped in a list of its own (top_k given at construction)
            assert len(result) == 1 and isinstance(result[0], list)
            result = result[0]
        cases.append({"text": text, "text_pair": text_pair, "ids": enc["input_ids"][0].tolist(),
                      "logits": floats(logits), "pipeline": plain(result)})
    head = {"source": "scripts/make_head_goldens.py", "task": "sequence-classification", "family": family,
            "model_class": type(pipe.model).__name__, "tokenizer": TOKENIZER_OF[family], "seed": seed,
            "reference": reference(),
            "notes": "pipeline: transformers.pipeline('text-classification', top_k=None, truncation=True); "
                     f"texts longer than {MODEL_MAX_LENGTH} tokens are truncated (pairs: longest_first)"}
    write_golden(out, head, cases)
    top = [max(c["pipeline"], key=lambda d: d["score"])["label"] for c in cases]
    return f"{len(cases)} cases, top labels {top}"


def crossencoder_case(out, name, family, configs, toks, seed, texts):
    sst2, long = texts["sst2"], texts["long"]
    passages = [sst2[0], sst2[1], sst2[2], fam.HARD[1], long]
    config = copy.deepcopy(configs[family])
    set_labels(config, 1, None)
    torch.manual_seed(seed)
    model = AutoModelForSequenceClassification.from_config(config).eval()
    draw_weights(model, seed, "seqcls")
    tok = toks[TOKENIZER_OF[family]]
    zero_unused_rows(model, used_ids(tok, QUERIES + passages, SPECIALS[TOKENIZER_OF[family]]))
    src = hf_tokenizer(None, family)
    center_bias(model, [src(q, p, truncation=True, return_tensors="pt") for q in QUERIES for p in passages])
    check_fp16(model)
    with tempfile.TemporaryDirectory() as tmp:
        model.half().save_pretrained(tmp)
        write_tokenizer_files(tmp, family)
        CrossEncoder(tmp, device="cpu", model_kwargs={"dtype": torch.float16}).save(out)
    write_tokenizer_files(out, family)  # save re-serialized them: the copy and our config instead
    tidy(out)
    check_f16(out)
    check_tokenizer(out, family, QUERIES + passages)

    ce = CrossEncoder(out, device="cpu", model_kwargs=dict(LOAD))
    ce.eval()
    assert ce.model.dtype == torch.float32
    cases = []
    for query in QUERIES:
        pairs = [(query, p) for p in passages]
        ids, logits = [], []
        for pair in pairs:
            features = ce.preprocess([pair])
            ids.append(features["input_ids"][0].tolist())
            with torch.no_grad():
                logits.append(f32(ce.model(input_ids=features["input_ids"],
                                           attention_mask=features["attention_mask"],
                                           **({"token_type_ids": features["token_type_ids"]}
                                              if "token_type_ids" in features else {})).logits[0, 0]))
        scores = ce.predict(pairs)
        rank = ce.rank(query, passages)
        cases.append({"query": query, "passages": passages, "ids": ids, "logits": logits,
                      "scores": floats(scores),
                      "rank": [{"corpus_id": int(r["corpus_id"]), "score": f32(r["score"])} for r in rank]})
    with open(os.path.join(out, "config_sentence_transformers.json"), encoding="utf-8") as f:
        activation = json.load(f).get("activation_fn")
    head = {"source": "scripts/make_head_goldens.py", "task": "cross-encoder", "family": family,
            "model_class": type(ce.model).__name__, "tokenizer": TOKENIZER_OF[family], "seed": seed,
            "reference": reference(), "activation_fn": activation,
            "notes": "scores: CrossEncoder.predict(pairs) (batch 32, padded, activation_fn applied); logits: "
                     "each pair alone; pairs truncated longest_first to the tokenizer's model_max_length"}
    write_golden(out, head, cases)
    return f"{len(cases)} queries, scores {[round(s, 3) for c in cases for s in c['scores']]}"


def ner_case(out, name, family, configs, toks, seed, texts):
    sst2, long = texts["sst2"], texts["long"]
    plain_texts = sst2 + fam.HARD + [NER_TEXT]
    config = copy.deepcopy(configs[family])
    set_labels(config, NER_LABELS, None)
    torch.manual_seed(seed)
    model = AutoModelForTokenClassification.from_config(config).eval()
    draw_weights(model, seed, "ner")
    tok = toks[TOKENIZER_OF[family]]
    zero_unused_rows(model, used_ids(tok, plain_texts + [long], SPECIALS[TOKENIZER_OF[family]]))
    src = hf_tokenizer(None, family)
    center_bias(model, [src(t, truncation=True, return_tensors="pt") for t in plain_texts + [long]], O_BOOST)
    check_fp16(model)
    model.half().save_pretrained(out)
    write_tokenizer_files(out, family)
    tidy(out)
    check_f16(out)
    check_tokenizer(out, family, plain_texts + [long])

    model = AutoModelForTokenClassification.from_pretrained(out, **LOAD).eval()
    assert model.dtype == torch.float32
    runs = [(t, None, None) for t in plain_texts] + [(long, stride, mml) for mml, stride in NER_WINDOWS]
    cases = []
    rule = None
    for text, stride, mml in runs:
        hf_tok = hf_tokenizer(out, family, mml)
        pipe = transformers.pipeline("token-classification", model=model, tokenizer=hf_tok, device="cpu")
        if rule is None:
            has_prefix = getattr(hf_tok, "_tokenizer", None) and getattr(
                hf_tok._tokenizer.model, "continuing_subword_prefix", None)
            rule = ("continuing_subword_prefix: is_subword = len(token) != len(text[start:end])" if has_prefix else
                    "fallback: is_subword = start > 0 and ' ' not in text[start - 1:start + 1]")
        case = {"text": text, "stride": stride, "model_max_length": mml}
        if stride is None:
            enc = hf_tok(text, truncation=True, return_tensors="pt")
            case["ids"] = enc["input_ids"][0].tolist()
            with torch.no_grad():
                logits = model(**enc).logits[0]
            case["logits"] = [floats(row) for row in logits]
        else:
            enc = hf_tok(text, truncation=True, stride=stride, return_overflowing_tokens=True)
            case["ids"] = enc["input_ids"][0]
            case["windows"] = len(enc["input_ids"])
        case["pipeline"] = {}
        for strategy in STRATEGIES:
            kwargs = {"aggregation_strategy": strategy}
            if stride is not None:
                kwargs["stride"] = stride
            try:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    result = pipe(text, **kwargs)
                case["pipeline"][strategy] = plain(result)
            except ValueError as e:
                case["pipeline"][strategy] = {"error": str(e)}
        cases.append(case)
    head = {"source": "scripts/make_head_goldens.py", "task": "token-classification", "family": family,
            "model_class": type(model).__name__, "tokenizer": TOKENIZER_OF[family], "seed": seed,
            "reference": reference(), "labels": NER_LABELS, "subword_rule": rule,
            "notes": "pipeline: transformers.pipeline('token-classification', aggregation_strategy=...) with "
                     "ignore_labels ['O'] (the default); model_max_length null: the tokenizer's "
                     f"{MODEL_MAX_LENGTH}; with a stride the tokenizer's model_max_length is set to the case's "
                     "and the pipeline merges the windows' entities; ids: the first window's"}
    write_golden(out, head, cases)
    groups = [len(c["pipeline"]["simple"]) for c in cases if isinstance(c["pipeline"]["simple"], list)]
    return f"{len(cases)} cases, simple groups per case {groups}"


def splade_case(out, name, family, configs, toks, seed, texts):
    inputs = texts["sst2"] + fam.HARD + [texts["long"]]
    config = copy.deepcopy(configs[family])
    torch.manual_seed(seed)
    model = AutoModelForMaskedLM.from_config(config).eval()
    draw_weights(model, seed, "mlm")
    tok = toks[TOKENIZER_OF[family]]
    zero_unused_rows(model, used_ids(tok, inputs, SPECIALS[TOKENIZER_OF[family]]))
    check_fp16(model)
    vocab = model.get_input_embeddings().weight.shape[0]
    with tempfile.TemporaryDirectory() as tmp:
        model.half().save_pretrained(tmp)
        write_tokenizer_files(tmp, family)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            mlm = MLMTransformer(tmp, model_kwargs={"dtype": torch.float16})
        SparseEncoder(modules=[mlm, SpladePooling(pooling_strategy="max", embedding_dimension=vocab)],
                      device="cpu").save(out)
    write_tokenizer_files(out, family)
    tidy(out)
    check_f16(out)
    check_tokenizer(out, family, inputs)

    se = SparseEncoder(out, device="cpu", model_kwargs=dict(LOAD))
    se.eval()
    assert se.transformers_model.dtype == torch.float32
    cases = []
    for text in inputs:
        ids = se.preprocess([text])["input_ids"][0].tolist()
        emb = se.encode([text])[0]
        dense = emb.to_dense()
        indices = torch.nonzero(dense).flatten()
        top = se.decode(emb, top_k=10)
        cases.append({"text": text, "ids": ids, "indices": indices.tolist(), "values": floats(dense[indices]),
                      "top": [[t, f32(w)] for t, w in top]})
    head = {"source": "scripts/make_head_goldens.py", "task": "splade", "family": family,
            "model_class": type(se.transformers_model).__name__, "tokenizer": TOKENIZER_OF[family], "seed": seed,
            "reference": reference(), "vocab": vocab,
            "notes": "SparseEncoder.encode([text]) one text at a time: max over tokens of log1p(relu(MLM logits)); "
                     f"texts truncated to {MODEL_MAX_LENGTH} tokens; top: SparseEncoder.decode(top_k=10)"}
    write_golden(out, head, cases)
    return f"{len(cases)} cases, nonzero {[len(c['indices']) for c in cases]}"


README = """# Task-head goldens

One directory per case: a small random-weight Hugging Face model directory with a task head, as
`save_pretrained` or sentence-transformers' `save` writes it (`config.json`, `model.safetensors` in
F16, `tokenizer.json` copied from `tests/tokenizer/data/json`, `tokenizer_config.json`, and for the
cross-encoders and SPLADE models sentence-transformers' own files), and `golden.json`: the
reference outputs of transformers' text-classification and token-classification pipelines and of
sentence-transformers' CrossEncoder (predict, rank) and SparseEncoder (encode, decode) for them.

- `*_seqcls`, `distilbert_multilabel`, `roberta_regression`, `modernbert_cls`, `modernbert_mean`:
  sequence classification (softmax, sigmoid, none; cls and mean pooling)
- `bert_crossencoder`, `xlm-roberta_crossencoder`: CrossEncoder, 1 label (Sigmoid)
- `*_ner`: token classification, every aggregation strategy, and a long text in strided windows
- `bert_splade`, `distilbert_splade`: SparseEncoder (MLMTransformer + SpladePooling max)

The encoders are the families of `../families` (same shapes and configurations), with 128
positions each. The weights are fp16-exact; word-embedding rows of tokens no case uses are zero
(the files compress in git; no case reads those rows).

Made by `scripts/make_head_goldens.py` (its docstring says how and from what); rerun with

    HF_HUB_OFFLINE=1 .venv-ref/bin/python scripts/make_head_goldens.py [--out tests/model/data/heads]

A rerun on the same library versions writes the same bytes.
"""


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", default=os.path.join(ROOT, "tests/model/data/heads"))
    p.add_argument("--seed", type=int, default=53)
    p.add_argument("--only", nargs="*", help="case names to make (default: all)")
    a = p.parse_args()
    torch.set_num_threads(1)
    transformers.utils.logging.set_verbosity_error()
    transformers.utils.logging.disable_progress_bar()
    logging.getLogger("sentence_transformers").setLevel(logging.ERROR)  # MLMTransformer's deprecation
    toks = {n: tokenizers.Tokenizer.from_file(os.path.join(fam.TOKENIZERS, n + ".tokenizer.json"))
            for n in set(TOKENIZER_OF.values())}
    vocab = {n: t.get_vocab_size() for n, t in toks.items()}
    configs = family_configs(vocab)
    texts = {"sst2": fam.sst2_sentences(), "long": fam.long_text()}
    for t in toks.values():
        assert len(t.encode(texts["long"]).ids) > fam.MAX_POSITIONS

    jobs = ([(n, seqcls_case, (f, labels, pt, extra)) for n, f, labels, pt, extra in SEQCLS]
            + [(n, crossencoder_case, (f,)) for n, f in CROSS]
            + [(f + "_ner", ner_case, (f,)) for f in NER]
            + [(n, splade_case, (f,)) for n, f in SPLADE])
    os.makedirs(a.out, exist_ok=True)
    for index, (name, make, args) in enumerate(jobs):
        if a.only and name not in a.only:
            continue
        out = os.path.join(a.out, name)
        if os.path.isdir(out):
            shutil.rmtree(out)
        os.makedirs(out)
        summary = make(out, name, *args, configs=configs, toks=toks, seed=a.seed + index, texts=texts)
        print(f"{name}: {summary}", flush=True)
    with open(os.path.join(a.out, "README.md"), "w", encoding="utf-8") as f:
        f.write(README)


if __name__ == "__main__":
    main()
