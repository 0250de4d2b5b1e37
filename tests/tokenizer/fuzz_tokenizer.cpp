// libFuzzer target: encode() and encode_pair() on arbitrary bytes must never crash, hang or read
// out of bounds, whatever the bytes (ill-formed UTF-8 included), and must keep their invariants.
// The vocabulary is built in memory so the fuzzer needs no model files.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "stile/text/wordpiece.hpp"

namespace {

using stile::Encoding;
using stile::Vocab;
using stile::WordPieceOptions;
using stile::WordPieceTokenizer;

constexpr char kVocab[] =
    "[PAD]\n[UNK]\n[CLS]\n[SEP]\n[MASK]\nthe\n##s\n##ing\nun\n##able\naff\n##aff\na\n##a\nb\n##b\n,\n.\n!\n"
    "cafe\n\xc3\xa9\n##\xc3\xa9\n\xe4\xb8\x80\n\xe4\xba\x8c\n##\xe4\xb8\x80\n\xd8\xa7\n##\xd8\xa7\n\xf0\x9f\x99\x82\n"
    "i\n##\xcc\x87\n[\n]\n#\n##\n";

const WordPieceTokenizer& tokenizer(bool split_special, bool cased) {
  static const auto make = [](bool split, bool keep_case) {
    WordPieceOptions options;
    options.split_special_tokens = split;
    options.normalizer.lowercase = !keep_case;
    options.max_length = 64;
    return WordPieceTokenizer(Vocab::parse(kVocab, "fuzz vocab"), options);
  };
  static const WordPieceTokenizer tokenizers[4] = {make(false, false), make(false, true), make(true, false),
                                                   make(true, true)};
  return tokenizers[(split_special ? 2 : 0) + (cased ? 1 : 0)];
}

void check(const Encoding& encoding, const WordPieceTokenizer& t, std::size_t max_length) {
  const std::size_t n = encoding.size();
  if (n < 2 || n > max_length || encoding.token_type_ids.size() != n || encoding.attention_mask.size() != n ||
      encoding.input_ids.front() != t.cls_id() || encoding.input_ids.back() != t.sep_id()) {
    std::abort();
  }
  for (const std::int32_t id : encoding.input_ids) {
    if (id < 0 || static_cast<std::size_t>(id) >= t.vocab().size()) std::abort();
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size == 0) return 0;
  // The first byte picks the options; the rest is the text (a 0xFF byte splits it into a pair).
  const std::uint8_t flags = data[0];
  const std::string_view text(reinterpret_cast<const char*>(data) + 1, size - 1);
  const WordPieceTokenizer& t = tokenizer(flags & 1, flags & 2);
  const std::size_t max_length = 3 + (flags >> 2);
  check(t.encode(text, max_length), t, max_length);
  if (const std::size_t split = text.find('\xff'); split != std::string_view::npos) {
    check(t.encode_pair(text.substr(0, split), text.substr(split + 1), max_length), t, max_length);
  }
  (void)t.tokenize(text);
  return 0;
}
