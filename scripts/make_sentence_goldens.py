#!/usr/bin/env python3
"""sentence-transformers pipelines over the small random-weight encoders of
tests/model/data/families, and SentenceTransformer.encode's embeddings for them: the golden files of
tests/model/test_sentence_pipelines.cpp (committed, so the test needs no torch).

Run with the reference venv (bench/peers/README.md):
    HF_HUB_OFFLINE=1 .venv-ref/bin/python scripts/make_sentence_goldens.py [--out tests/model/data/sentence]

Each pipeline is built from sentence-transformers' own modules (Transformer, Pooling, Dense,
Normalize), saved with SentenceTransformer.save, loaded back with SentenceTransformer(dir) and run
with encode(..., convert_to_numpy=True) in fp32 on one thread: the files are the ones
sentence-transformers writes, and the reference reads them as a user's model directory would be
read. One directory per pipeline keeps what save wrote except the encoder's weights and tokenizer
(model.safetensors, tokenizer.json: the test copies them from the family's directory, unchanged)
and the model card; golden.json holds, per case, the text, the prompt name, the token ids and the
embedding.

The pipelines cover every pooling mode (cls, max, mean, mean_sqrt_len_tokens, weightedmean,
lasttoken), several at once (concatenated in the configured order), the legacy pooling_mode_* flags,
include_prompt false, Dense modules (Tanh, Identity without bias, GELU with a residual projection),
Normalize, named prompts with a default, and a max length shorter than a case (truncation).
"""
import argparse
import json
import os
import shutil
import tempfile

os.environ.setdefault("HF_HUB_OFFLINE", "1")
import numpy as np  # noqa: E402
import sentence_transformers  # noqa: E402
import torch  # noqa: E402
import transformers  # noqa: E402
from sentence_transformers import SentenceTransformer  # noqa: E402
from sentence_transformers.base.modules import Dense, Normalize, Transformer  # noqa: E402
from sentence_transformers.sentence_transformer.modules import Pooling  # noqa: E402

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
FAMILIES = os.path.join(ROOT, "tests/model/data/families")
# The tokenizer as the tokenizers library reads it (transformers' class for a family, e.g. MPNet's,
# would build its own pipeline from a vocab.txt), with the special tokens declared so that the
# reference's prompt length leaves out the trailing separator as it does for real models.
SPECIALS = {
    "bert_wordpiece": dict(unk_token="[UNK]", cls_token="[CLS]", sep_token="[SEP]", pad_token="[PAD]",
                           mask_token="[MASK]"),
    "roberta_bpe": dict(bos_token="<s>", eos_token="</s>", unk_token="<unk>", cls_token="<s>", sep_token="</s>",
                        pad_token="<pad>", mask_token="<mask>"),
}
FAMILY_TOKENIZER = {"bert": "bert_wordpiece", "modernbert": "bert_wordpiece", "mpnet": "roberta_bpe"}
# What the test copies back from the family's directory (not committed twice).
FROM_FAMILY = ("model.safetensors", "tokenizer.json")

TEXTS = [
    "A gripping, beautifully acted film.",
    "the plot is thin and the jokes fall flat",
    "Café naïve — déjà vu!",
    # longer than the short pipeline's max length (truncated there)
    "it is a sprawling , ambitious and often very funny picture that never quite finds the heart it keeps "
    "promising , but the cast is game and the last act lands",
]


def pipelines():
    """(name, family, max_seq_length or None, modules after the Transformer, SentenceTransformer kwargs,
    cases as (text index, prompt name), legacy pooling flags)."""
    all_texts = [(i, None) for i in range(len(TEXTS))]
    return [
        ("cls_dense_tanh_normalize", "bert", None,
         lambda h: [Pooling(h, pooling_mode="cls"), Dense(h, 32), Normalize()], {}, all_texts, False),
        ("max", "bert", None, lambda h: [Pooling(h, pooling_mode="max")], {}, all_texts, False),
        ("legacy_sqrt_weighted_dense2", "bert", None,
         lambda h: [Pooling(h, pooling_mode=("mean_sqrt_len_tokens", "weightedmean")),
                    Dense(2 * h, 48, bias=False, activation_function=torch.nn.Identity()),
                    Dense(48, 16, activation_function=torch.nn.GELU(), use_residual=True)],
         {}, all_texts, True),
        ("lasttoken_mean_prompts", "bert", 24,
         lambda h: [Pooling(h, pooling_mode=("lasttoken", "mean"), include_prompt=False)],
         dict(prompts={"query": "query: ", "passage": "passage: "}, default_prompt_name="query"),
         [(0, None), (1, "passage"), (3, None), (3, "passage"), (2, "query")], False),
        ("mpnet_mean_normalize", "mpnet", None, lambda h: [Pooling(h, pooling_mode="mean"), Normalize()], {},
         all_texts, False),
        ("modernbert_cls_prompts", "modernbert", None,
         lambda h: [Pooling(h, pooling_mode="cls", include_prompt=False), Normalize()],
         dict(prompts={"search_query": "search_query: ", "search_document": "search_document: "}),
         [(0, "search_query"), (1, "search_document"), (3, None)], False),
    ]


def to_legacy_pooling(path):
    """Rewrites a Pooling config the way older sentence-transformers wrote it: one flag per mode and
    word_embedding_dimension (the reference still reads it; so must stile)."""
    with open(path) as f:
        config = json.load(f)
    modes = config.pop("pooling_mode")
    modes = [modes] if isinstance(modes, str) else modes
    legacy = {"word_embedding_dimension": config.pop("embedding_dimension")}
    for key, mode in [("pooling_mode_cls_token", "cls"), ("pooling_mode_mean_tokens", "mean"),
                      ("pooling_mode_max_tokens", "max"), ("pooling_mode_mean_sqrt_len_tokens", "mean_sqrt_len_tokens"),
                      ("pooling_mode_weightedmean_tokens", "weightedmean"), ("pooling_mode_lasttoken", "lasttoken")]:
        legacy[key] = mode in modes
    legacy.update(config)
    with open(path, "w") as f:
        json.dump(legacy, f, indent=4)


def redraw_dense(module, seed):
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for _, p in sorted(module.named_parameters()):
            p.copy_(0.2 * torch.randn(p.shape, generator=g))


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", default=os.path.join(ROOT, "tests/model/data/sentence"))
    p.add_argument("--seed", type=int, default=47)
    a = p.parse_args()
    torch.set_num_threads(1)
    shutil.rmtree(a.out, ignore_errors=True)
    os.makedirs(a.out)
    index = []
    for k, (name, family, max_len, make_modules, kwargs, cases, legacy) in enumerate(pipelines()):
        with tempfile.TemporaryDirectory() as tmp:
            base = os.path.join(tmp, "base")
            shutil.copytree(os.path.join(FAMILIES, family), base,
                            ignore=shutil.ignore_patterns("golden.*"))
            with open(os.path.join(base, "tokenizer_config.json"), "w") as f:
                json.dump(dict(tokenizer_class="PreTrainedTokenizerFast", **SPECIALS[FAMILY_TOKENIZER[family]]), f)
            transformer = Transformer(base, max_seq_length=max_len, model_kwargs={"dtype": torch.float32},
                                      config_kwargs={"attn_implementation": "eager"})
            modules = make_modules(transformer.get_embedding_dimension())
            for j, m in enumerate(modules):
                if isinstance(m, Dense):
                    redraw_dense(m, a.seed + 10 * k + j)
            saved = os.path.join(tmp, "saved")
            SentenceTransformer(modules=[transformer] + modules, **kwargs).save(saved)
            if legacy:
                to_legacy_pooling(os.path.join(saved, "1_Pooling", "config.json"))
            model = SentenceTransformer(saved, device="cpu", model_kwargs={"dtype": torch.float32})
            model.eval()
            out_cases = []
            for text_index, prompt_name in cases:
                text = TEXTS[text_index]
                embedding = model.encode([text], prompt_name=prompt_name, convert_to_numpy=True)[0]
                prompt = model.prompts.get(prompt_name if prompt_name is not None else model.default_prompt_name or "", "")
                ids = model.tokenize([prompt + text])["input_ids"][0].tolist()
                out_cases.append({"text": text, "prompt_name": prompt_name, "ids": ids,
                                  "embedding": [float(x) for x in embedding.astype(np.float32)]})
            dest = os.path.join(a.out, name)
            shutil.copytree(saved, dest, ignore=lambda d, names: [n for n in names if os.path.samefile(d, saved) and
                                                                  n in FROM_FAMILY + ("README.md",)])
        golden = {"source": "scripts/make_sentence_goldens.py", "family": family,
                  "reference": {"sentence_transformers": sentence_transformers.__version__,
                                "transformers": transformers.__version__, "torch": torch.__version__},
                  "dim": len(out_cases[0]["embedding"]), "cases": out_cases}
        with open(os.path.join(dest, "golden.json"), "w") as f:
            json.dump(golden, f, indent=1)
        index.append(name)
        print(f"{name}: {golden['dim']} dims, {len(out_cases)} cases")
    print(f"wrote {len(index)} pipelines to {a.out}")


if __name__ == "__main__":
    main()
