#!/usr/bin/env python3
"""The tokenizer.json parity material of stile: trained tokenizers, goldens, the reference
half of the full sweep.

The reference is Hugging Face `tokenizers` (0.23.3, the Python binding of the Rust library), with
`transformers`' slow-to-fast converter for the SentencePiece models. No download is possible, so
every tokenizer is trained here, on SST-2 train sentences only (never dev).

Setup once (a venv of its own, no torch; .venv-ref is gitignored; scripts/tokenizer-parity does it
when it is missing):

    python3 -m venv .venv-ref && .venv-ref/bin/pip install transformers tokenizers sentencepiece protobuf

Run from the repository root (`P=.venv-ref/bin/python`):

    $P scripts/make_tokenizer_json_goldens.py train      # tests/tokenizer/data/json/<name>.tokenizer.json
    $P scripts/make_tokenizer_json_goldens.py goldens    # tests/tokenizer/data/json/<name>.golden.jsonl
    $P scripts/make_tokenizer_json_goldens.py reference --tokenizer NAME --count N --seed S --out REF.jsonl
    $P scripts/make_tokenizer_json_goldens.py compare --tokenizer NAME REF.jsonl STILE.jsonl

`goldens` is deterministic (fixed seeds) and reads the COMMITTED tokenizer files. `train` is not
bit-for-bit: the sentencepiece models and the BPE trainers reproduce, but tokenizers' WordPiece and
Unigram trainers break ties in Rust HashMap order (random per process), so a retrain gives a few
different pieces; retrain only to change a tokenizer, then rerun `goldens`.
NAME is a committed tokenizer's name or `minilm` (all-MiniLM-L6-v2's own tokenizer.json, read from
--model-dir, never committed).

The tokenizers:
  bert_wordpiece  BertWordPieceTokenizer's layout: BertNormalizer (lowercase, strip_accents=false),
                  BertPreTokenizer, WordPiece, BertProcessing
  roberta_bpe     RoBERTa's: ByteLevel pre-tokenizer, byte-level BPE, RobertaProcessing (trim_offsets),
                  <s> <pad> </s> <unk> and <mask> (lstrip) as special added tokens
  unigram         tokenizers' Unigram trainer, NFKC, Metaspace, TemplateProcessing
  xlm_roberta     sentencepiece unigram (nmt_nfkc) -> transformers' XLMRobertaConverter
  albert          sentencepiece unigram (nmt_nfkc) -> AlbertConverter (lowercase, NFKD + StripAccents)
  deberta_v3      sentencepiece unigram (nmt_nfkc) -> DebertaV2Converter
  mix_wordpiece   normalizers Sequence [NFD, StripAccents, Lowercase, Replace (regex and string), Strip,
                  NFKC], pre-tokenizers Sequence [Split (contiguous, invert), Digits (individual),
                  Punctuation, WhitespaceSplit], WordPiece, TemplateProcessing with custom type ids,
                  added tokens with single_word / lstrip / rstrip / normalized true and false
  mix_bpe_suffix  NFKC, Replace, Prepend; Sequence [CharDelimiterSplit, Split (removed,
                  merged_with_previous, merged_with_next; string and regex), Whitespace]; BPE with
                  continuing_subword_prefix "##" and end_of_word_suffix "</w>"; TemplateProcessing
  mix_bpe_bytes   Llama's layout: Prepend + Replace(" ", "▁") normalizer, no pre-tokenizer, BPE with
                  byte_fallback and fuse_unk (the <0x00>..<0xFF> pieces in the vocab)
  mix_bytelevel   NFC, Split (isolated digits) + ByteLevel (add_prefix_space, no trim), byte-level BPE,
                  post-processor Sequence [ByteLevel (trim_offsets), TemplateProcessing]
  mix_unigram_bytes  Unigram with byte_fallback, Strip + Lowercase + NFKD normalizer, Sequence
                  [Punctuation (isolated), Metaspace (first, split)]

Case format (one JSON object a line; the goldens, the sweep, tokenizer_tool dump):
  {"text": hex of the input bytes, "pair": hex or null, "add_special_tokens": bool,
   "truncation": null or {"max_length", "stride", "strategy"},
   "ids", "type_ids", "offsets": [[begin, end], ...], "special_tokens_mask", "overflowing": [...]}
or the inputs and {"error": "..."} when the reference raises (or panics). Offsets are BYTE offsets
into the original bytes of the text they point into (the first text, or the second of a pair: the
token's sequence id says which): the reference's char offsets into
bytes.decode("utf-8", errors="replace"), each code point counted as its UTF-8 bytes and each U+FFFD
that came from an ill-formed subpart as that subpart's bytes. "overflowing" holds encodings of the
same fields (ids ... overflowing).
"""
import argparse
import base64
import codecs
import json
import os
import sys
import tempfile
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("RAYON_NUM_THREADS", "1")
os.environ.setdefault("RUST_BACKTRACE", "0")

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import tokenizer_stress_corpus as stress  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DATA = os.path.join(ROOT, "tests", "tokenizer", "data", "json")
SST2_TRAIN = os.path.join(ROOT, "..", "shared", "data", "sst2", "train.tsv")
DEFAULT_MODEL_DIR = os.path.expanduser(os.environ.get("STILE_MODEL_DIR", "~/.cache/stile/all-MiniLM-L6-v2"))

COMMITTED = ["bert_wordpiece", "roberta_bpe", "unigram", "xlm_roberta", "albert", "deberta_v3",
             "mix_wordpiece", "mix_bpe_suffix", "mix_bpe_bytes", "mix_bytelevel", "mix_unigram_bytes"]
ALL = COMMITTED + ["minilm"]

# Golden sizes per tokenizer (the tests read them all: keep them small).
GOLDEN_SINGLES, GOLDEN_PAIRS, GOLDEN_TRUNCATED = 200, 70, 40
GOLDEN_SEED = 41


def log(*a):
    print(*a, file=sys.stderr, flush=True)


def tokenizer_path(name, model_dir=DEFAULT_MODEL_DIR):
    if name == "minilm":
        return os.path.join(model_dir, "tokenizer.json")
    return os.path.join(DATA, name + ".tokenizer.json")


# ---------------------------------------------------------------------------------------------
# Training


def sst2_train():
    return stress.read_sst2(SST2_TRAIN)


def finish(tok):
    """No truncation or padding stored in the committed files (the cases set truncation)."""
    tok.no_truncation()
    tok.no_padding()
    return tok


def save(tok, name):
    path = tokenizer_path(name)
    finish(tok).save(path, pretty=False)
    edit_json(name, lambda j: None)  # normalize the layout
    log(f"  {name}: {os.path.getsize(path)} bytes, vocab {tok.get_vocab_size()}")


def edit_json(name, fn):
    path = tokenizer_path(name)
    with open(path, encoding="utf-8") as f:
        j = json.load(f)
    fn(j)
    with open(path, "w", encoding="utf-8") as f:
        json.dump(j, f, ensure_ascii=False, separators=(",", ":"))
        f.write("\n")


def train_bert_wordpiece(texts):
    from tokenizers import BertWordPieceTokenizer
    t = BertWordPieceTokenizer(clean_text=True, handle_chinese_chars=True, strip_accents=False, lowercase=True)
    t.train_from_iterator(texts, vocab_size=3000, min_frequency=2, limit_alphabet=500,
                          special_tokens=["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"], show_progress=False)
    # BertWordPieceTokenizer sets its BertProcessing only when [CLS] and [SEP] are in the vocab at
    # construction, so before training they are not: set it now, as the trained one would have.
    from tokenizers import processors
    tok = t._tokenizer
    tok.post_processor = processors.BertProcessing(("[SEP]", tok.token_to_id("[SEP]")), ("[CLS]", tok.token_to_id("[CLS]")))
    save(tok, "bert_wordpiece")


def train_roberta_bpe(texts):
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=True, use_regex=True)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=3000, min_frequency=2, show_progress=False,
                                  special_tokens=["<s>", "<pad>", "</s>", "<unk>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(texts, trainer)
    tok.add_special_tokens([AddedToken("<mask>", lstrip=True, rstrip=False, normalized=False, special=True)])
    tok.post_processor = processors.RobertaProcessing(("</s>", tok.token_to_id("</s>")), ("<s>", tok.token_to_id("<s>")),
                                                      trim_offsets=True, add_prefix_space=False)
    save(tok, "roberta_bpe")


def train_unigram(texts):
    from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers
    tok = Tokenizer(models.Unigram())
    tok.normalizer = normalizers.NFKC()
    tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="always", split=True)
    tok.decoder = decoders.Metaspace(replacement="▁", prepend_scheme="always", split=True)
    trainer = trainers.UnigramTrainer(vocab_size=3000, show_progress=False, unk_token="<unk>", max_piece_length=12,
                                      special_tokens=["<pad>", "<unk>", "<s>", "</s>"])
    tok.train_from_iterator(texts, trainer)
    tok.post_processor = processors.TemplateProcessing(
        single="<s> $A </s>", pair="<s> $A </s> </s> $B </s>",
        special_tokens=[("<s>", tok.token_to_id("<s>")), ("</s>", tok.token_to_id("</s>"))])
    save(tok, "unigram")


def train_spm(texts, workdir, prefix, **kw):
    import sentencepiece as spm
    corpus = os.path.join(workdir, "sst2_train.txt")
    if not os.path.exists(corpus):
        with open(corpus, "w", encoding="utf-8") as f:
            for s in texts:
                f.write(s + "\n")
    args = dict(input=corpus, model_prefix=os.path.join(workdir, prefix), model_type="unigram", vocab_size=3000,
                normalization_rule_name="nmt_nfkc", character_coverage=1.0, num_threads=1, minloglevel=2,
                seed_sentencepiece_size=200000, shuffle_input_sentence=False)
    args.update(kw)
    spm.SentencePieceTrainer.train(**args)
    return os.path.join(workdir, prefix + ".model")


class SlowShim:
    """What transformers' converters read of a slow tokenizer (transformers 5 has no slow classes)."""

    def __init__(self, vocab_file, **attrs):
        import sentencepiece as spm
        self.vocab_file = vocab_file
        self.sp = spm.SentencePieceProcessor(model_file=vocab_file)
        self.ids = {}
        self.__dict__.update(attrs)

    def convert_tokens_to_ids(self, token):
        if token in self.ids:
            return self.ids[token]
        return self.sp.piece_to_id(token)


def convert(converter_class, shim, specials, name):
    """Converts as transformers would, then adds the special tokens as its fast tokenizer's init does."""
    from tokenizers import AddedToken
    tok = converter_class(shim).converted()
    tok.add_special_tokens([AddedToken(t, **kw) for t, kw in specials])
    save(tok, name)
    return tok


def train_sentencepiece_family(texts):
    from transformers.convert_slow_tokenizer import AlbertConverter, DebertaV2Converter, XLMRobertaConverter
    plain = dict(normalized=False, special=True)
    with tempfile.TemporaryDirectory() as d:
        # XLM-RoBERTa: <unk>=0 <s>=1 </s>=2 in the model; the converter puts the fairseq order first
        # (<s> <pad> </s> <unk>) and <mask> last.
        m = train_spm(texts, d, "xlmr")
        n = 3000 + 1 - 3 + 4  # vocab length after the converter (pieces[3:] + 4 + <mask>)
        shim = SlowShim(m, add_prefix_space=True)
        shim.ids = {"<s>": 0, "<pad>": 1, "</s>": 2, "<unk>": 3, "<mask>": n - 1}
        convert(XLMRobertaConverter, shim,
                [("<s>", plain), ("<pad>", plain), ("</s>", plain), ("<unk>", plain),
                 ("<mask>", dict(lstrip=True, rstrip=False, normalized=False, special=True))], "xlm_roberta")
        # ALBERT: <pad>=0 <unk>=1 [CLS]=2 [SEP]=3 [MASK]=4, lowercased, accents stripped.
        m = train_spm(texts, d, "albert", pad_id=0, unk_id=1, bos_id=2, eos_id=3, bos_piece="[CLS]", eos_piece="[SEP]",
                      control_symbols=["[MASK]"])
        shim = SlowShim(m, do_lower_case=True, keep_accents=False, add_prefix_space=True)
        convert(AlbertConverter, shim,
                [("[CLS]", plain), ("[SEP]", plain), ("<unk>", plain), ("<pad>", plain),
                 ("[MASK]", dict(lstrip=True, rstrip=False, normalized=False, special=True))], "albert")
        # DeBERTa-v3: [PAD]=0 [CLS]=1 [SEP]=2 [UNK]=3, [MASK] added after the vocab. Its converter
        # keeps byte_fallback off (handle_byte_fallback = False), as the real spm.model has it.
        m = train_spm(texts, d, "debv3", pad_id=0, bos_id=1, eos_id=2, unk_id=3, pad_piece="[PAD]", bos_piece="[CLS]",
                      eos_piece="[SEP]", unk_piece="[UNK]")
        shim = SlowShim(m, do_lower_case=False, split_by_punct=False, add_prefix_space=True)
        convert(DebertaV2Converter, shim,
                [("[CLS]", plain), ("[SEP]", plain), ("[UNK]", plain), ("[PAD]", plain), ("[MASK]", plain)], "deberta_v3")


def train_mix_wordpiece(texts):
    from tokenizers import AddedToken, Regex, Tokenizer, models, normalizers, pre_tokenizers, processors, trainers
    tok = Tokenizer(models.WordPiece(unk_token="[UNK]", max_input_chars_per_word=40))
    tok.normalizer = normalizers.Sequence([
        normalizers.NFD(), normalizers.StripAccents(), normalizers.Lowercase(),
        normalizers.Replace(Regex(r"\s+"), " "), normalizers.Replace("''", '"'), normalizers.Replace("n't", " not"),
        normalizers.Strip(left=True, right=True), normalizers.NFKC()])
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(r"[a-z]+"), behavior="contiguous", invert=True),
        pre_tokenizers.Digits(individual_digits=True),
        pre_tokenizers.Punctuation(behavior="isolated"),
        pre_tokenizers.WhitespaceSplit()])
    trainer = trainers.WordPieceTrainer(vocab_size=2500, min_frequency=2, show_progress=False, limit_alphabet=300,
                                        special_tokens=["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[EOS]"])
    tok.train_from_iterator(texts, trainer)
    tok.add_special_tokens([
        AddedToken("[MASK]", lstrip=True, rstrip=True, normalized=False, special=True),
        AddedToken("<ent>", single_word=True, normalized=False, special=True)])
    tok.add_tokens([
        AddedToken("movie star", single_word=False, normalized=True, special=False),
        AddedToken("Ölig", single_word=True, normalized=False, special=False),
        AddedToken("good", single_word=True, normalized=True, special=False),
        AddedToken(" xyz", lstrip=False, rstrip=True, normalized=False, special=False),
        AddedToken("café", normalized=True, special=False)])
    tok.post_processor = processors.TemplateProcessing(
        single="[CLS]:3 $A:0 [SEP]:3",
        pair="[CLS]:2 $A:0 [SEP]:2 $B:5 [SEP]:5 [EOS]:7",
        special_tokens=[("[CLS]", tok.token_to_id("[CLS]")), ("[SEP]", tok.token_to_id("[SEP]")),
                        ("[EOS]", tok.token_to_id("[EOS]"))])
    save(tok, "mix_wordpiece")


def train_mix_bpe_suffix(texts):
    from tokenizers import AddedToken, Regex, Tokenizer, models, normalizers, pre_tokenizers, processors, trainers
    tok = Tokenizer(models.BPE(unk_token="<unk>", continuing_subword_prefix="##", end_of_word_suffix="</w>"))
    tok.normalizer = normalizers.Sequence([
        normalizers.NFKC(), normalizers.Replace("--", " — "), normalizers.Replace(Regex(r"(\d)\.(\d)"), "<dot>"),
        normalizers.Prepend("^")])
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.CharDelimiterSplit("|"),
        pre_tokenizers.Split("-", behavior="removed"),
        pre_tokenizers.Split(Regex(r"[,;]"), behavior="merged_with_previous"),
        pre_tokenizers.Split("'", behavior="merged_with_next"),
        pre_tokenizers.Whitespace()])
    trainer = trainers.BpeTrainer(vocab_size=2500, min_frequency=2, show_progress=False, limit_alphabet=300,
                                  continuing_subword_prefix="##", end_of_word_suffix="</w>",
                                  special_tokens=["<unk>", "<cls>", "<sep>"])
    tok.train_from_iterator(texts, trainer)
    tok.add_special_tokens([AddedToken("<sep>", lstrip=True, normalized=False, special=True)])
    tok.add_tokens([AddedToken("new york", normalized=True, special=False),
                    AddedToken("<dot>", normalized=True, special=False),
                    AddedToken("ok", single_word=True, lstrip=True, rstrip=True, normalized=False, special=False)])
    tok.post_processor = processors.TemplateProcessing(
        single="<cls> $A <sep>", pair="<cls>:0 $A:0 <sep>:0 $B:1 <sep>:1",
        special_tokens=[("<cls>", tok.token_to_id("<cls>")), ("<sep>", tok.token_to_id("<sep>"))])
    save(tok, "mix_bpe_suffix")


def byte_pieces():
    return [f"<0x{b:02X}>" for b in range(256)]


def train_mix_bpe_bytes(texts):
    from tokenizers import AddedToken, Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers
    tok = Tokenizer(models.BPE(unk_token="<unk>", fuse_unk=True))
    tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="first", split=True)  # training only
    trainer = trainers.BpeTrainer(vocab_size=2500, min_frequency=2, show_progress=False, limit_alphabet=200,
                                  special_tokens=["<unk>", "<s>", "</s>"])
    tok.train_from_iterator(texts, trainer)
    tok.pre_tokenizer = None
    tok.normalizer = normalizers.Sequence([normalizers.Prepend("▁"), normalizers.Replace(" ", "▁")])
    tok.decoder = decoders.Sequence([decoders.Replace("▁", " "), decoders.ByteFallback(), decoders.Fuse(),
                                     decoders.Strip(content=" ", left=1)])
    tok.post_processor = processors.TemplateProcessing(
        single="<s> $A", pair="<s> $A <s>:1 $B:1", special_tokens=[("<s>", tok.token_to_id("<s>"))])
    tok.add_tokens([AddedToken("▁the▁movie", normalized=True, special=False)])
    save(tok, "mix_bpe_bytes")

    def add_bytes(j):
        m = j["model"]
        m["byte_fallback"] = True
        n = max(m["vocab"].values()) + 1
        for p in byte_pieces():
            if p not in m["vocab"]:
                m["vocab"][p] = n
                n += 1
        # the added token's id after the vocab
        for a in j["added_tokens"]:
            if a["content"] not in m["vocab"]:
                a["id"] = n
                n += 1
    edit_json("mix_bpe_bytes", add_bytes)


def train_mix_bytelevel(texts):
    from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers
    tok = Tokenizer(models.BPE())
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(r"\p{N}{1,3}"), behavior="isolated"),
        pre_tokenizers.ByteLevel(add_prefix_space=True, trim_offsets=False, use_regex=True)])
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=2500, min_frequency=2, show_progress=False,
                                  special_tokens=["[CLS]", "[SEP]", "[PAD]", "[UNK]"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(texts, trainer)
    tok.add_special_tokens([AddedToken("[MASK]", lstrip=True, normalized=False, special=True)])
    tok.add_tokens([AddedToken(" great film", normalized=True, special=False)])
    tok.post_processor = processors.Sequence([
        processors.ByteLevel(trim_offsets=True, add_prefix_space=True),
        processors.TemplateProcessing(
            single="[CLS] $A [SEP]", pair="[CLS] $A [SEP] $B:1 [SEP]:1",
            special_tokens=[("[CLS]", tok.token_to_id("[CLS]")), ("[SEP]", tok.token_to_id("[SEP]"))])])
    save(tok, "mix_bytelevel")


def train_mix_unigram_bytes(texts):
    from tokenizers import AddedToken, Tokenizer, models, normalizers, pre_tokenizers, processors, trainers
    tok = Tokenizer(models.Unigram())
    tok.normalizer = normalizers.Sequence([normalizers.Strip(left=False, right=True), normalizers.Lowercase(),
                                           normalizers.NFKD()])
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Punctuation(behavior="isolated"),
        pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="first", split=True)])
    trainer = trainers.UnigramTrainer(vocab_size=2000, show_progress=False, unk_token="<unk>", max_piece_length=10,
                                      special_tokens=["<unk>", "<cls>", "<sep>"])
    tok.train_from_iterator(texts, trainer)
    tok.add_special_tokens([AddedToken("<sep>", normalized=False, special=True)])
    tok.add_tokens([AddedToken("▁not", normalized=True, special=False)])
    tok.post_processor = processors.TemplateProcessing(
        single="$A:0 <sep>:0 <cls>:2", pair="$A:0 <sep>:0 $B:1 <sep>:1 <cls>:2",
        special_tokens=[("<cls>", tok.token_to_id("<cls>")), ("<sep>", tok.token_to_id("<sep>"))])
    save(tok, "mix_unigram_bytes")

    def add_bytes(j):
        m = j["model"]
        m["byte_fallback"] = True
        have = {p for p, _ in m["vocab"]}
        m["vocab"] += [[p, -20.0] for p in byte_pieces() if p not in have]
        n = len(m["vocab"])
        for a in j["added_tokens"]:
            if a["content"] not in have:
                a["id"] = n
                n += 1
    edit_json("mix_unigram_bytes", add_bytes)


def cmd_train(args):
    os.makedirs(DATA, exist_ok=True)
    texts = sst2_train()
    log(f"training on {len(texts)} SST-2 train sentences")
    steps = {"bert_wordpiece": train_bert_wordpiece, "roberta_bpe": train_roberta_bpe, "unigram": train_unigram,
             "sentencepiece": train_sentencepiece_family, "mix_wordpiece": train_mix_wordpiece,
             "mix_bpe_suffix": train_mix_bpe_suffix, "mix_bpe_bytes": train_mix_bpe_bytes,
             "mix_bytelevel": train_mix_bytelevel, "mix_unigram_bytes": train_mix_unigram_bytes}
    for k, fn in steps.items():
        if args.only and k not in args.only:
            continue
        fn(texts)
    # Each must load back and encode.
    from tokenizers import Tokenizer
    for name in COMMITTED:
        Tokenizer.from_file(tokenizer_path(name)).encode("a test", "of loading")


# ---------------------------------------------------------------------------------------------
# The reference


class Decoded:
    """bytes.decode("utf-8", "replace") with the byte boundary of every char."""
    _errors = []

    @staticmethod
    def _handler(e):
        Decoded._errors.append((e.start, e.end))
        return ("\ufffd", e.end)

    def __init__(self, data):
        Decoded._errors = []
        self.text = data.decode("utf-8", errors="stile_record")
        errors = dict(Decoded._errors)
        bounds = [0]
        pos = 0
        for ch in self.text:
            if pos in errors and ch == "\ufffd":
                pos = errors[pos]
            else:
                pos += len(ch.encode("utf-8"))
            bounds.append(pos)
        assert pos == len(data), (data, pos)
        self.bounds = bounds


codecs.register_error("stile_record", Decoded._handler)


def added_token_contents(tok):
    try:
        return [t.content for t in tok.get_added_tokens_decoder().values()]
    except AttributeError:
        return []


def encoding_fields(e, decoded):
    offsets = []
    for (b, en), seq, special in zip(e.offsets, e.sequence_ids, e.special_tokens_mask):
        if seq is None:
            # Without a post-processor the reference's pair windows lose the second text's
            # sequence ids (the first text's tokens keep theirs): a non-special token there is the
            # second text's. Special tokens have (0, 0) in either.
            seq = 1 if len(decoded) > 1 and not special else 0
        d = decoded[seq]
        offsets.append([d.bounds[b], d.bounds[en]])
    return {"ids": e.ids, "type_ids": e.type_ids, "offsets": offsets, "special_tokens_mask": e.special_tokens_mask,
            "overflowing": [encoding_fields(o, decoded) for o in e.overflowing]}


def case_inputs(c):
    return {"text": c["text"].hex(), "pair": None if c["pair"] is None else c["pair"].hex(),
            "add_special_tokens": c["add_special_tokens"], "truncation": c["truncation"]}


class Reference:
    def __init__(self, path):
        from tokenizers import Tokenizer
        self.tok = finish(Tokenizer.from_file(path))
        self.truncation = None

    def run(self, c):
        """The golden line (a dict) of one case (bytes inputs)."""
        out = case_inputs(c)
        try:
            if c["truncation"] != self.truncation:
                self.tok.no_truncation()
                self.truncation = None
                if c["truncation"]:
                    t = c["truncation"]
                    self.tok.enable_truncation(t["max_length"], stride=t["stride"], strategy=t["strategy"])
                    self.truncation = c["truncation"]
            decoded = [Decoded(c["text"])]
            if c["pair"] is not None:
                decoded.append(Decoded(c["pair"]))
            e = self.tok.encode(decoded[0].text, decoded[1].text if c["pair"] is not None else None,
                                add_special_tokens=c["add_special_tokens"])
            out.update(encoding_fields(e, decoded))
        except (KeyboardInterrupt, SystemExit):
            raise
        except BaseException as ex:  # noqa: B036 (pyo3's PanicException is a BaseException)
            out["error"] = f"{type(ex).__name__}: {str(ex).splitlines()[0] if str(ex) else ''}"
        return out


class QuietStderr:
    """Rust panics print to fd 2; the cases that panic are recorded as errors, the noise is dropped."""

    def __enter__(self):
        sys.stderr.flush()
        self.saved = os.dup(2)
        self.progress = os.fdopen(os.dup(self.saved), "w", buffering=1)
        null = os.open(os.devnull, os.O_WRONLY)
        os.dup2(null, 2)
        os.close(null)
        return self.progress

    def __exit__(self, *a):
        os.dup2(self.saved, 2)
        os.close(self.saved)
        self.progress.close()


GOLDEN_TEXT_BYTES = 160     # texts cut to this in the goldens
GOLDEN_LINE_CHARS = 3000    # a case whose answer is longer is drawn again (pairs with a stride can
                            # give thousands of overflowing windows: the sweep has those)


def golden_rows(name, ref):
    corpus = stress.Corpus(GOLDEN_SEED + (COMMITTED.index(name) if name in COMMITTED else 100), sst2_train(),
                           added_token_contents(ref.tok))
    rows = []
    for count, pair, truncation in ((GOLDEN_SINGLES, False, False), (GOLDEN_PAIRS, True, False),
                                    (GOLDEN_TRUNCATED, None, True)):
        n = 0
        while n < count:
            c = corpus.case(pair=corpus.rng.random() < 0.6 if pair is None else pair, truncation=truncation)
            for k in ("text", "pair"):
                if c[k] is not None and len(c[k]) > GOLDEN_TEXT_BYTES:
                    c[k] = c[k][:GOLDEN_TEXT_BYTES]
            r = ref.run(c)
            if len(json.dumps(r, separators=(",", ":"))) > GOLDEN_LINE_CHARS:
                continue
            rows.append(r)
            n += 1
    return rows


def write_jsonl(path, rows):
    with open(path, "w", encoding="utf-8") as f:
        for r in rows:
            f.write(json.dumps(r, ensure_ascii=True, separators=(",", ":")) + "\n")


def cmd_goldens(args):
    names = args.only or ALL
    for name in names:
        path = tokenizer_path(name, args.model_dir)
        ref = Reference(path)
        with QuietStderr():
            rows = golden_rows(name, ref)
        out = os.path.join(DATA, name + ".golden.jsonl")
        write_jsonl(out, rows)
        errors = sum(1 for r in rows if "error" in r)
        log(f"  {name}: {len(rows)} cases ({errors} errors), {os.path.getsize(out)} bytes -> {os.path.relpath(out, ROOT)}")


def cmd_reference(args):
    """The sweep's reference half: N stress cases for one tokenizer, with the reference's answers."""
    path = args.tokenizer_file or tokenizer_path(args.tokenizer, args.model_dir)
    ref = Reference(path)
    corpus = stress.Corpus(args.seed, sst2_train(), added_token_contents(ref.tok))
    t0 = time.time()
    with open(args.out, "w", encoding="utf-8") as f, QuietStderr() as progress:
        for i in range(args.count):
            r = ref.run(corpus.case())
            f.write(json.dumps(r, ensure_ascii=True, separators=(",", ":")) + "\n")
            if (i + 1) % 10000 == 0 or i + 1 == args.count:
                progress.write(f"\r  reference {args.tokenizer}: {i + 1}/{args.count} ({time.time() - t0:.0f} s)")
        progress.write("\n")


# ---------------------------------------------------------------------------------------------
# Comparison

FIELDS = ("ids", "type_ids", "offsets", "special_tokens_mask", "overflowing")


def cmd_compare(args):
    """Prints the match rate of stile's answers against the reference's; exit 1 below 100%."""
    total = 0
    match = {f: 0 for f in FIELDS + ("error", "all")}
    shown = []
    with open(args.reference, encoding="utf-8") as fr, open(args.stile, encoding="utf-8") as fs:
        for lr, ls in zip(fr, fs):
            r = json.loads(lr)
            try:
                s = json.loads(ls)
            except json.JSONDecodeError:
                s = {"error": "tokenizer_tool wrote a line that is not JSON: " + ls[:200]}
            total += 1
            ok_all = True
            if ("error" in r) != ("error" in s) or s.get("tool_error"):
                # tool_error: the case was unreadable or stile threw something other than stile::Error
                ok_all = False
                diff = ["error"]
            else:
                match["error"] += 1
                diff = []
                if "error" not in r:
                    for f in FIELDS:
                        if r.get(f) == s.get(f):
                            match[f] += 1
                        else:
                            diff.append(f)
                            ok_all = False
                else:
                    for f in FIELDS:
                        match[f] += 1
            if ok_all:
                match["all"] += 1
            elif len(shown) < args.show:
                shown.append((r, s, diff))
        extra_r, extra_s = fr.readline(), fs.readline()
    if extra_r or extra_s:
        log(f"{args.tokenizer}: the reference and stile files differ in length")
        match["all"] = -1
    rate = (lambda k: 100.0 * match[k] / total if total else 0.0)
    print(f"{args.tokenizer:18s} {total:7d} cases  all {rate('all'):7.3f}%  ids {rate('ids'):7.3f}%  "
          f"type_ids {rate('type_ids'):7.3f}%  offsets {rate('offsets'):7.3f}%  "
          f"special_mask {rate('special_tokens_mask'):7.3f}%  overflowing {rate('overflowing'):7.3f}%  "
          f"errors-agree {rate('error'):7.3f}%", flush=True)
    for r, s, diff in shown:
        def show(h):
            return None if h is None else repr(bytes.fromhex(h))
        print(f"    mismatch in {','.join(diff)}: text={show(r['text'])} pair={show(r['pair'])} "
              f"add_special_tokens={r['add_special_tokens']} truncation={r['truncation']}")
        for f in diff:
            if f == "error":
                print(f"      reference: {r.get('error', 'no error')}\n      stile:     {s.get('error', 'no error')}")
            else:
                print(f"      reference {f}: {json.dumps(r.get(f))[:400]}\n      stile     {f}: {json.dumps(s.get(f))[:400]}")
    return 0 if total and match["all"] == total else 1


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    t = sub.add_parser("train")
    t.add_argument("--only", nargs="*")
    g = sub.add_parser("goldens")
    g.add_argument("--only", nargs="*")
    g.add_argument("--model-dir", default=DEFAULT_MODEL_DIR)
    r = sub.add_parser("reference")
    r.add_argument("--tokenizer", required=True, help="a name of " + ", ".join(ALL))
    r.add_argument("--tokenizer-file", help="another tokenizer.json than the named one's")
    r.add_argument("--count", type=int, default=100000)
    r.add_argument("--seed", type=int, default=1)
    r.add_argument("--out", required=True)
    r.add_argument("--model-dir", default=DEFAULT_MODEL_DIR)
    c = sub.add_parser("compare")
    c.add_argument("--tokenizer", default="")
    c.add_argument("--show", type=int, default=5)
    c.add_argument("reference")
    c.add_argument("stile")
    args = p.parse_args()
    return {"train": cmd_train, "goldens": cmd_goldens, "reference": cmd_reference, "compare": cmd_compare}[args.cmd](args) or 0


if __name__ == "__main__":
    sys.exit(main())
