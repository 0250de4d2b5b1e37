#!/usr/bin/env python3
"""A tiny random BERT checkpoint with a classification head, and PyTorch's logits for it: the
golden files of tests/model/test_checkpoint_classifier.cpp (committed, ~40 KB, so the test needs
no torch).

Run with the reference venv (bench/peers/README.md):
    HF_HUB_OFFLINE=1 .venv-ref/bin/python scripts/make_classifier_goldens.py [--out tests/model/data/tiny_classifier]

The checkpoint has the layout scripts/finetune_elastic.py writes: a sentence-transformers directory
(modules.json: Transformer, Pooling (mean), Normalize) whose model.safetensors holds the BERT tensors
plus classifier.weight [2, hidden] and classifier.bias [2]; config.json names the classes in id2label.
The reference logits are transformers' BertModel (eager attention, fp32): mean pooling over the
attention mask, L2 normalization, then the linear layer, for each sentence alone (batch 1).
The same logits from finetune_elastic.py's ElasticBert forward (the one it trains) are checked
against these here, so the training tool and the engine agree on what the classifier reads.
"""
import argparse
import json
import os
import sys

os.environ.setdefault("HF_HUB_OFFLINE", "1")
import torch  # noqa: E402
from safetensors.torch import save_file  # noqa: E402
from transformers import BertConfig, BertModel  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import finetune_elastic  # noqa: E402

WORDS = ("the a film movie is was not very good bad great dull funny boring charming story , . ! "
         "and but it 's too long short fun love hate ##s ##ly ##ing").split()
SENTENCES = [
    "the film is very good .",
    "a dull , boring movie",
    "not funny but charming !",
    "it 's too long and the story is bad",
    "great fun",
    "Loving the films , hating the story",
]


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "..", "tests/model/data/tiny_classifier"))
    a = p.parse_args()
    torch.manual_seed(20)
    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + WORDS
    config = BertConfig(vocab_size=len(vocab), hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                        intermediate_size=64, max_position_embeddings=64, hidden_act="gelu",
                        layer_norm_eps=1e-12, attn_implementation="eager")
    model = BertModel(config, add_pooling_layer=False).eval()
    with torch.no_grad():  # larger than the default init, so the layers do visible work
        for prm in model.parameters():
            prm.normal_(0.0, 0.2)
    weight = torch.randn(2, 32) * 3.0
    bias = torch.randn(2) * 0.5
    os.makedirs(os.path.join(a.out, "1_Pooling"), exist_ok=True)
    os.makedirs(os.path.join(a.out, "2_Normalize"), exist_ok=True)
    with open(os.path.join(a.out, "vocab.txt"), "w") as f:
        f.write("\n".join(vocab) + "\n")
    cfg = config.to_dict()
    keep = ("vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size",
            "max_position_embeddings", "hidden_act", "layer_norm_eps", "type_vocab_size", "pad_token_id",
            "model_type", "position_embedding_type")
    cfg = {k: cfg[k] for k in keep if k in cfg}
    cfg.update({"architectures": ["BertModel"], "id2label": {"0": "negative", "1": "positive"},
                "label2id": {"negative": 0, "positive": 1}})
    with open(os.path.join(a.out, "config.json"), "w") as f:
        json.dump(cfg, f, indent=1)
    with open(os.path.join(a.out, "tokenizer_config.json"), "w") as f:
        json.dump({"do_lower_case": True, "tokenizer_class": "BertTokenizer"}, f)
    with open(os.path.join(a.out, "modules.json"), "w") as f:
        json.dump([{"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
                   {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"},
                   {"idx": 2, "name": "2", "path": "2_Normalize", "type": "sentence_transformers.models.Normalize"}],
                  f, indent=1)
    with open(os.path.join(a.out, "sentence_bert_config.json"), "w") as f:
        json.dump({"max_seq_length": 64, "do_lower_case": False}, f)
    with open(os.path.join(a.out, "1_Pooling", "config.json"), "w") as f:
        json.dump({"word_embedding_dimension": 32, "pooling_mode_cls_token": False, "pooling_mode_mean_tokens": True,
                   "pooling_mode_max_tokens": False, "pooling_mode_mean_sqrt_len_tokens": False}, f, indent=1)
    tensors = {k: v.contiguous() for k, v in model.state_dict().items() if "position_ids" not in k}
    tensors["classifier.weight"] = weight.contiguous()
    tensors["classifier.bias"] = bias.contiguous()
    save_file(tensors, os.path.join(a.out, "model.safetensors"), metadata={"format": "pt"})

    from transformers import BertTokenizer
    tok = BertTokenizer(os.path.join(a.out, "vocab.txt"), do_lower_case=True)
    elastic = finetune_elastic.build(torch)(model, num_labels=2)
    with torch.no_grad():
        elastic.classifier.weight.copy_(weight)
        elastic.classifier.bias.copy_(bias)
    elastic.eval()
    cases = []
    for s in SENTENCES:
        ids = tok(s, return_tensors="pt")
        with torch.no_grad():
            hidden = model(input_ids=ids["input_ids"], attention_mask=ids["attention_mask"]).last_hidden_state[0]
            pooled = torch.nn.functional.normalize(hidden.mean(0), dim=0)
            logits = weight @ pooled + bias
            mine = elastic(ids["input_ids"], ids["attention_mask"], m=finetune_elastic.SHARDS)[0]
        assert torch.allclose(logits, mine, atol=1e-5), (s, logits, mine)
        cases.append({"text": s, "token_ids": ids["input_ids"][0].tolist(), "logits": logits.tolist()})
    with open(os.path.join(a.out, "logits.json"), "w") as f:
        json.dump({"source": "scripts/make_classifier_goldens.py (transformers BertModel, fp32, eager)",
                   "cases": cases}, f, indent=1)
    print(f"wrote {a.out}: {len(cases)} cases")


if __name__ == "__main__":
    main()
