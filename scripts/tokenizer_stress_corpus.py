"""The stress corpus of the tokenizer.json parity sweep (scripts/tokenizer-parity) and of the committed
goldens (scripts/make_tokenizer_json_goldens.py): deterministic for a seed, pure Python (no
tokenizers import), so the same cases can be made again anywhere.

A case is a dict {"text": bytes, "pair": bytes | None, "add_special_tokens": bool,
"truncation": None | {"max_length", "stride", "strategy"}}. Texts are BYTES, not str: the corpus
holds ill-formed UTF-8 and unpaired surrogates written as bytes (ED A0 80), which a str cannot.

What it draws from: SST-2 train sentences (the tokenizers were trained on them, so most words are
in the vocabularies) and generated strings: code points sampled from every 128-code-point range of
Unicode that holds an assigned character (so every script block), combining mark runs, emoji with
ZWJ, skin tones, flags and variation selectors, every whitespace, control and format character,
unpaired surrogates, ill-formed UTF-8 (truncated sequences, overlongs, bytes F5..FF, lone
continuation bytes, code points above U+10FFFF), the tokenizer's own special and added tokens
embedded in text (with spaces around them and without, cut in half, doubled, in other case), very
long words, empty and whitespace-only strings, numbers, CJK, Hangul, Arabic with diacritics,
Devanagari, Thai, Hebrew, mixed scripts, URLs, e-mail addresses and code.
"""
import random
import sys
import unicodedata

STRATEGIES = ("longest_first", "only_first", "only_second")


def _assigned_ranges():
    """Code points of each 128-aligned range that holds at least one assigned character."""
    ranges = []
    for start in range(0, 0x110000, 128):
        if 0xD800 <= start < 0xE000:
            continue  # surrogates: written as bytes elsewhere
        cps = [c for c in range(start, start + 128) if unicodedata.category(chr(c)) != "Cn"]
        if cps:
            ranges.append(cps)
    return ranges


_RANGES = None


def ranges():
    global _RANGES
    if _RANGES is None:
        _RANGES = _assigned_ranges()
    return _RANGES


_BY_CATEGORY = None


def by_category():
    """Code points below U+30000 by general category (the first letter and the full one)."""
    global _BY_CATEGORY
    if _BY_CATEGORY is None:
        d = {}
        for c in range(0x30000):
            if 0xD800 <= c < 0xE000:
                continue
            cat = unicodedata.category(chr(c))
            d.setdefault(cat, []).append(c)
        _BY_CATEGORY = d
    return _BY_CATEGORY


WHITESPACE = [0x09, 0x0A, 0x0B, 0x0C, 0x0D, 0x20, 0x85, 0xA0, 0x1680, 0x180E] + list(range(0x2000, 0x200C)) + [
    0x2028, 0x2029, 0x202F, 0x205F, 0x3000, 0xFEFF, 0x200D, 0x2060]

SCRIPT_SAMPLES = [
    "中文字符测试，我们的生活很美好。", "日本語のテキスト、カタカナとひらがな。", "한국어 텍스트 입니다. 안녕하세요!",
    "العربية مع التشكيل: بِسْمِ اللَّهِ الرَّحْمَٰنِ الرَّحِيمِ", "हिन्दी पाठ: नमस्ते दुनिया, क्षत्रिय।",
    "ภาษาไทยไม่มีช่องว่างระหว่างคำ", "עברית עם ניקוד: שָׁלוֹם", "Ελληνικά: Καλημέρα κόσμε", "Русский текст: Съешь же ещё этих мягких булок",
    "Tiếng Việt có dấu: Phở bò", "Ærøskøbing Ångström naïve café résumé façade", "ქართული ენა", "Հայերեն",
    "ᐊᓂᔑᓈᐯᒧᐎᓐ", "ትግርኛ", "ᚠᚢᚦᚨᚱᚲ", "𝔘𝔫𝔦𝔠𝔬𝔡𝔢 𝕸𝖆𝖙𝖍 𝟙𝟚𝟛", "ｆｕｌｌｗｉｄｔｈ　ＡＢＣ　１２３", "ﬁﬂﬀ ﬃ ẞß ǅ ǈ ǋ", "Ⅻ ⅻ ① ⑳ ㈱ ㎏ ℃ ™ ℡",
    "தமிழ் மொழி", "বাংলা ভাষা", "ગુજરાતી", "ಕನ್ನಡ", "മലയാളം", "සිංහල", "ᠮᠣᠩᠭᠣᠯ", "ꦗꦮ", "𓀀𓀁𓂀", "𐌰𐌱𐌲",
]

URLS = ["https://www.example.com/path?q=1&r=two#frag", "http://localhost:8080/", "ftp://a.b/c_d-e.txt",
        "user.name+tag@example.co.uk", "www.hugging-face.co/docs/tokenizers", "C:\\Users\\x\\file.txt", "#hashtag @mention"]

CODE = ["def f(x):\n    return x**2 + 1  # comment", "int main(){return 0;}", "for (i=0;i<n;i++) { a[i] += b[i]; }",
        "<div class=\"a\">Hi &amp; bye</div>", "SELECT * FROM t WHERE id=42;", "λx.x → ∀y∃z", "$HOME/.cache && ls -la | grep foo",
        "{\"key\": [1, 2.5e-3, null, true]}", "a_b__c___d", "x==y!=z<=w>=v", "```python\nprint('hi')\n```"]

NUMBERS = ["0", "42", "3.14159", "1,000,000", "-17", "+1e10", "2.5e-3", "007", "1/2", "50%", "$9.99", "€10,50",
           "١٢٣٤", "१२३", "一二三", "12:30pm", "2024-01-15", "v1.2.3", "0x1F", "٣.١٤"]

EMOJI = ["😀", "👍🏽", "👨‍👩‍👧‍👦", "🏳️‍🌈", "🇫🇷🇩🇪", "❤️", "☺︎", "🧑🏿‍💻", "👩‍❤️‍💋‍👨", "#️⃣", "🫠", "🏴󠁧󠁢󠁳󠁣󠁴󠁿", "✌🏻", "🦄"]

ILL_FORMED = [b"\xed\xa0\x80", b"\xed\xbf\xbf", b"\xed\xa0\xbd\xed\xb8\x80", b"\xc0\x80", b"\xc1\xbf", b"\xe0\x80\x80",
              b"\xf0\x80\x80\x80", b"\xf4\x90\x80\x80", b"\xf5", b"\xff", b"\xfe", b"\x80", b"\xbf", b"\xc3", b"\xe2\x82",
              b"\xf0\x9f\x98", b"\xe2\x28\xa1", b"\xf8\x88\x80\x80\x80", b"\x80\x80\x80", b"\xc3\x28", b"\xef\xbf\xbd"]

WORDS_FALLBACK = ["the", "movie", "is", "a", "good", "bad", "film", "story", "with", "and", "of", "it", "'s", "n't"]


class Corpus:
    def __init__(self, seed, sst2_sentences, added_tokens):
        """added_tokens: the contents of the tokenizer's added tokens (specials and others)."""
        self.rng = random.Random(seed)
        self.sst2 = sst2_sentences or [" ".join(WORDS_FALLBACK)]
        self.words = sorted({w for s in self.sst2[:5000] for w in s.split()}) or WORDS_FALLBACK
        self.added = [t for t in added_tokens if t] or ["[UNK]"]

    # ---- pieces (str unless they say bytes) ----
    def word(self):
        return self.rng.choice(self.words)

    def sentence(self):
        return self.rng.choice(self.sst2)

    def words_text(self, lo=1, hi=12):
        r = self.rng
        ws = [self.word() for _ in range(r.randint(lo, hi))]
        if r.random() < 0.3:
            ws = [w.capitalize() if r.random() < 0.5 else w.upper() for w in ws]
        return " ".join(ws)

    def block_chars(self, n=None):
        r = self.rng
        cps = r.choice(ranges())
        n = n or r.randint(1, 12)
        return "".join(chr(r.choice(cps)) for _ in range(n))

    def category_chars(self, cat, n=None):
        r = self.rng
        cps = by_category().get(cat) or [0x20]
        n = n or r.randint(1, 6)
        return "".join(chr(r.choice(cps)) for _ in range(n))

    def combining(self):
        r = self.rng
        base = r.choice(["a", "e", "o", "n", "A", "ı", "α", "я", "ก", "क", " ", "", "1", "ß"])
        marks = "".join(chr(r.choice(by_category()["Mn"])) for _ in range(r.randint(1, 5)))
        common = r.choice(["\u0301", "\u0308", "\u0327", "\u0300\u0301", "\u20dd", "\u0345", "\u093c", "\u0e31"])
        return base + (marks if r.random() < 0.5 else common)

    def whitespace(self):
        r = self.rng
        return "".join(chr(r.choice(WHITESPACE)) for _ in range(r.randint(1, 4)))

    def control(self):
        r = self.rng
        pool = list(range(0x00, 0x20)) + [0x7F] + list(range(0x80, 0xA0)) + by_category()["Cf"]
        return "".join(chr(r.choice(pool)) for _ in range(r.randint(1, 3)))

    def added_token(self):
        r = self.rng
        t = r.choice(self.added)
        x = r.random()
        if x < 0.1:
            return t[: max(1, len(t) // 2)]  # cut: must not match
        if x < 0.2:
            return t.lower() if t != t.lower() else t.upper()
        if x < 0.3:
            return t + t
        return t

    def long_word(self):
        r = self.rng
        n = r.choice([50, 99, 100, 101, 150, 200, 257, 500, 1000])
        kind = r.random()
        if kind < 0.4:
            return r.choice("abcdefghijklmnopqrstuvwxyz") * n
        if kind < 0.7:
            return "".join(r.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(n))
        if kind < 0.8:
            return "".join(r.choice("0123456789") for _ in range(n))
        if kind < 0.9:
            return "".join(self.word() for _ in range(max(1, n // 5)))
        return self.block_chars(min(n, 300))

    def fragment(self):
        """One str piece of one of the kinds."""
        r = self.rng
        k = r.randrange(17)
        if k == 0:
            return self.sentence()
        if k == 1:
            return self.words_text()
        if k == 2:
            return self.block_chars()
        if k == 3:
            return self.combining()
        if k == 4:
            return r.choice(EMOJI) * r.randint(1, 2)
        if k == 5:
            return self.whitespace()
        if k == 6:
            return self.control()
        if k == 7:
            return self.added_token()
        if k == 8:
            return r.choice(NUMBERS)
        if k == 9:
            return r.choice(SCRIPT_SAMPLES)
        if k == 10:
            return r.choice(URLS)
        if k == 11:
            return r.choice(CODE)
        if k == 12:
            return self.category_chars(r.choice(["Po", "Ps", "Pe", "Pd", "Pc", "Pi", "Pf", "Sm", "Sc", "Sk", "So", "Nd",
                                                 "Nl", "No", "Lm", "Lo", "Lu", "Ll", "Lt", "Mc", "Me", "Zs", "Co"]))
        if k == 13:
            return self.word() + r.choice(["'s", "n't", "-", "...", ",", ".", "!", "?!", "--", "'"]) + self.word()
        if k == 14:
            return "  ".join(self.word() for _ in range(r.randint(1, 4)))
        if k == 15:
            return "".join(self.word() for _ in range(r.randint(2, 4)))
        return r.choice(["▁", "Ġ", "##", "</w>", "Ċ", "<0x41>", "\u2581\u2581", "##a", "`` ''", "''"])

    def text(self):
        """One text, as bytes."""
        r = self.rng
        x = r.random()
        if x < 0.03:
            return b""
        if x < 0.06:
            return self.whitespace().encode()
        if x < 0.25:
            return self.sentence().encode()
        if x < 0.28:
            return self.long_word().encode()
        parts = []
        for _ in range(r.randint(1, 6)):
            y = r.random()
            if y < 0.06:
                parts.append(r.choice(ILL_FORMED))
            elif y < 0.08:
                parts.append(bytes(r.randrange(256) for _ in range(r.randint(1, 6))))
            else:
                parts.append(self.fragment().encode("utf-8", "surrogatepass"))
        seps = [b" ", b"", b"  ", b"\t", b"\n", b" ", b" "]
        out = parts[0]
        for p in parts[1:]:
            out += r.choice(seps) + p
        if r.random() < 0.05:
            out = b" " + out
        if r.random() < 0.05:
            out = out + b" "
        return out

    def truncation(self):
        r = self.rng
        return {"max_length": r.randint(8, 64), "stride": r.randint(0, 4), "strategy": r.choice(STRATEGIES)}

    def case(self, pair=None, truncation=None):
        r = self.rng
        if pair is None:
            pair = r.random() < 0.3
        if truncation is None:
            truncation = r.random() < 0.3
        return {
            "text": self.text(),
            "pair": self.text() if pair else None,
            "add_special_tokens": r.random() < 0.85,
            "truncation": self.truncation() if truncation else None,
        }


def read_sst2(path, limit=None):
    out = []
    with open(path, encoding="utf-8") as f:
        next(f)
        for line in f:
            s = line.rstrip("\n").split("\t")[0].rstrip(" ")
            if s:
                out.append(s)
            if limit and len(out) >= limit:
                break
    return out


def cases(seed, count, sst2_sentences, added_tokens):
    c = Corpus(seed, sst2_sentences, added_tokens)
    return [c.case() for _ in range(count)]


if __name__ == "__main__":
    # A look at a few cases: python scripts/tokenizer_stress_corpus.py SST2_TSV [N]
    cs = cases(1, int(sys.argv[2]) if len(sys.argv) > 2 else 10, read_sst2(sys.argv[1]), ["[CLS]", "<mask>"])
    for c in cs:
        print(c)
