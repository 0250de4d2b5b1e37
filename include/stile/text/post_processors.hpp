#pragma once
// The post-processors of a tokenizer.json (what adds [CLS]/[SEP], <s>/</s>, sets type ids and
// trims offsets) and the whole post-processing step of the reference's encode: Hugging Face
// tokenizers' processors/{bert,roberta,template,sequence}.rs, pre_tokenizers/byte_level.rs
// (ByteLevel as a post-processor: process_offsets), the PostProcessor trait's process and
// default_process (tokenizer/mod.rs), Encoding::merge_with (tokenizer/encoding.rs).
//
// The pipeline calls post_process() below with each text's encoding straight from the model; it
// truncates (truncation.hpp), then runs the processor, or the reference's default without one.
//
// Kept from the reference on purpose (each checked against tokenizers 0.23.3):
// - overflowing windows are processed too, and a pair whose both texts overflow combines them as
//   merge_with does (every window of the first with the second and its windows; the windows can
//   have windows of their own);
// - sequence_ids as the reference's get_sequence_ids, including its quirk: an encoding whose
//   ranges do not name sequence 0 reports 0 for every token;
// - the JSON is read as the reference's untagged enum does: a "RobertaProcessing" without both
//   trim_offsets and add_prefix_space is read as BertProcessing, and a "BertProcessing" with both
//   as RobertaProcessing.
// - trim_offsets counts the spaces at a token's ends in its text: the model's vocabulary string
//   ('Ġ' = one space byte), a special token's own string, and for an added token with lstrip or
//   rstrip the text it matched (which includes the whitespace it took), and moves the offsets by
//   that many characters (the reference's offsets count characters). Both need the texts: pass
//   them to post_process. Without them (PostProcessor::process) offsets move by the bytes the
//   characters stand for, and an lstrip/rstrip token's whitespace is read from its offsets: the
//   same on ASCII text, not on a token that splits a multi-byte character.
// Stricter than the reference (it accepts these and panics or misbehaves when encoding): a
// template naming a special token it does not define, a special token whose ids and tokens differ
// in length or whose id is in neither the model's vocabulary nor the added tokens, a single
// template using $B, are errors when read.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "stile/core/error.hpp"
#include "stile/text/added_vocabulary.hpp"
#include "stile/text/encoding.hpp"
#include "stile/text/tokenizer_parts.hpp"
#include "stile/text/truncation.hpp"
#include "stile/text/utf8.hpp"

namespace stile::tok {

namespace post_detail {

// The whitespace at the two ends of a token's text, as process_offsets counts it: characters
// that are 'Ġ' (U+0120) or White_Space, and how many bytes of the original text they stand for.
struct Trim {
  std::uint16_t lead_chars = 0;
  std::uint16_t lead_bytes = 0;
  std::uint16_t trail_chars = 0;
  std::uint16_t trail_bytes = 0;
  std::uint8_t text = 2;   // which text the token's offsets are in (0, 1; 2: none given)
  bool from_text = false;  // an added token with lstrip/rstrip: count in the text it matched
  bool lstrip = false;     // from_text: which sides took whitespace,
  bool rstrip = false;
  std::uint32_t content_bytes = 0;  // and the bytes of the content without it
};

// `vocabulary`: a model's token string, where 'Ġ' stands for one space byte; else text whose
// characters are the original's.
[[nodiscard]] inline Trim trim_of(std::string_view s, bool vocabulary) {
  const std::u32string chars = utf8::to_code_points(s);
  const auto is_space = [](char32_t c) { return c == 0x120 || added_detail::is_white_space(c); };
  const auto bytes = [vocabulary](char32_t c) -> unsigned {
    if (c == 0x120 && vocabulary) return 1;
    return c < 0x80 ? 1 : c < 0x800 ? 2 : c < 0x10000 ? 3 : 4;
  };
  Trim t;
  unsigned lead_chars = 0, lead_bytes = 0, trail_chars = 0, trail_bytes = 0;
  for (std::size_t i = 0; i < chars.size() && is_space(chars[i]); ++i) {
    ++lead_chars;
    lead_bytes += bytes(chars[i]);
  }
  for (std::size_t i = chars.size(); i > 0 && is_space(chars[i - 1]); --i) {
    ++trail_chars;
    trail_bytes += bytes(chars[i - 1]);
  }
  const auto cap = [](unsigned v) { return static_cast<std::uint16_t>(std::min(v, 0xFFFFu)); };
  t.lead_chars = cap(lead_chars);
  t.lead_bytes = cap(lead_bytes);
  t.trail_chars = cap(trail_chars);
  t.trail_bytes = cap(trail_bytes);
  return t;
}

// One sequence range of the reference's sequence_ranges map.
struct SeqRange {
  int seq;
  std::size_t begin, end;
};

// The reference's Encoding, with the fields post-processing reads or writes.
struct Enc {
  std::vector<std::int32_t> ids;
  std::vector<std::int32_t> type_ids;
  std::vector<TokenOffsets> offsets;
  std::vector<std::uint8_t> special;
  std::vector<Trim> trims;
  std::vector<Enc> overflowing;
  std::vector<SeqRange> ranges;

  [[nodiscard]] std::size_t size() const noexcept { return ids.size(); }
  void insert_range(int seq, std::size_t begin, std::size_t end) {
    for (SeqRange& r : ranges) {
      if (r.seq == seq) {
        r.begin = begin;
        r.end = end;
        return;
      }
    }
    ranges.push_back({seq, begin, end});
  }
  void set_sequence_id(int seq) { insert_range(seq, 0, size()); }
  void set_type_ids(std::int32_t type_id) { type_ids.assign(size(), type_id); }
};

inline void append(Enc& self, const Enc& other) {
  self.ids.insert(self.ids.end(), other.ids.begin(), other.ids.end());
  self.type_ids.insert(self.type_ids.end(), other.type_ids.begin(), other.type_ids.end());
  self.offsets.insert(self.offsets.end(), other.offsets.begin(), other.offsets.end());
  self.special.insert(self.special.end(), other.special.begin(), other.special.end());
  self.trims.insert(self.trims.end(), other.trims.begin(), other.trims.end());
}

// The reference's merge_with (growing_offsets false, as every caller here).
inline void merge_with(Enc& self, const Enc& pair) {
  std::vector<Enc> overflowings;
  for (const Enc& self_o : self.overflowing) {
    Enc n = self_o;
    merge_with(n, pair);
    overflowings.push_back(std::move(n));
    for (const Enc& other_o : pair.overflowing) {
      Enc m = self_o;
      merge_with(m, other_o);
      overflowings.push_back(std::move(m));
    }
  }
  for (const Enc& other_o : pair.overflowing) {
    Enc n = self;
    merge_with(n, other_o);
    overflowings.push_back(std::move(n));
  }
  const std::size_t original = self.size();
  for (const SeqRange& r : pair.ranges) self.insert_range(r.seq, original + r.begin, original + r.end);
  append(self, pair);
  self.overflowing = std::move(overflowings);
}

// The reference's Encoding::merge (merge_with from an empty encoding). Merging into the empty one
// gives the first encoding as it is, overflowing included, so the first is moved.
[[nodiscard]] inline Enc merge(std::vector<Enc>&& encodings) {
  if (encodings.empty()) return {};
  Enc out = std::move(encodings[0]);
  for (std::size_t i = 1; i < encodings.size(); ++i) merge_with(out, encodings[i]);
  return out;
}

// The original texts, when the caller gives them: trim_offsets then moves offsets by characters
// of the text, as the reference does on its character offsets.
struct Texts {
  std::optional<std::string_view> text[2];
};

// Byte offset `count` characters after `from` (a character start), at most `limit`.
[[nodiscard]] inline std::uint32_t chars_forward(std::string_view text, std::uint32_t from, std::size_t count,
                                                 std::uint32_t limit) {
  std::size_t at = from;
  for (; count > 0 && at < limit; --count) at += utf8::decode(text, at).size;
  return static_cast<std::uint32_t>(std::min<std::size_t>(at, limit));
}
[[nodiscard]] inline std::size_t count_chars(std::string_view text, std::size_t from, std::size_t to) {
  std::size_t n = 0;
  for (std::size_t at = from; at < to; ++n) at += utf8::decode(text, at).size;
  return n;
}

// The reference's process_offsets (ByteLevel and RoBERTa's trim_offsets). It counts characters
// of the token's string and moves the token's character offsets by them; with the text here the
// byte offsets move by as many characters of the text, without it by the bytes the characters
// stand for.
inline void process_offsets(Enc& e, bool add_prefix_space, const Texts& texts) {
  // Characters before a byte offset, counted on from the last one asked (tokens come in order).
  std::size_t counted_to[2] = {0, 0};
  std::size_t counted[2] = {0, 0};
  const auto chars_before = [&](std::uint8_t which, std::string_view text, std::size_t offset) {
    if (offset < counted_to[which]) {
      counted_to[which] = 0;
      counted[which] = 0;
    }
    counted[which] += count_chars(text, counted_to[which], offset);
    counted_to[which] = offset;
    return counted[which];
  };
  for (std::size_t i = 0; i < e.size() && i < e.trims.size(); ++i) {
    const Trim& t = e.trims[i];
    TokenOffsets& o = e.offsets[i];
    if (t.lead_chars == 0 && t.trail_chars == 0) continue;
    const std::optional<std::string_view> text = t.text < 2 ? texts.text[t.text] : std::nullopt;
    if (text && o.begin <= o.end && o.end <= text->size()) {
      const std::uint32_t begin = o.begin;
      if (t.lead_chars > 0) {
        const bool is_first = i == 0 || o.begin == 0;
        const std::size_t lead = is_first && add_prefix_space && t.lead_chars == 1 ? 0 : t.lead_chars;
        o.begin = chars_forward(*text, o.begin, lead, o.end);
      }
      if (t.trail_chars > 0) {
        const std::size_t k = count_chars(*text, begin, o.end);
        if (k >= t.trail_chars) {
          o.end = std::max(chars_forward(*text, begin, k - t.trail_chars, o.end), o.begin);
        } else if (chars_before(t.text, *text, begin) + k >= t.trail_chars) {
          o.end = o.begin;  // moved back past the token's start: the start, as max() gives
        }
      }
      continue;
    }
    if (t.lead_chars > 0) {
      const bool is_first = i == 0 || o.begin == 0;
      const std::uint32_t lead = is_first && add_prefix_space && t.lead_chars == 1 ? 0 : t.lead_bytes;
      o.begin = std::min(o.begin + lead, o.end);
    }
    if (t.trail_chars > 0 && o.end >= t.trail_bytes) o.end = std::max<std::uint32_t>(o.end - t.trail_bytes, o.begin);
  }
}

// A special token a processor adds: its ids and the strings its trims come from.
struct Special {
  std::vector<std::int32_t> ids;
  std::vector<Trim> trims;
};

[[nodiscard]] inline Enc special_enc(const Special& s, std::int32_t type_id) {
  Enc e;
  e.ids = s.ids;
  e.type_ids.assign(s.ids.size(), type_id);
  e.offsets.assign(s.ids.size(), TokenOffsets{});
  e.special.assign(s.ids.size(), 1);
  e.trims = s.trims;
  return e;
}

// One post-processor of the tree (a Sequence holds others): the reference's process_encodings.
class Step {
 public:
  virtual ~Step() = default;
  [[nodiscard]] virtual std::size_t added_tokens(bool is_pair) const = 0;
  virtual void process_encodings(std::vector<Enc>& encodings, bool add_special_tokens, const Texts& texts) const = 0;
  [[nodiscard]] virtual bool trims() const = 0;  // whether any trim_offsets is on (needs token texts)
};

// BertProcessing and RobertaProcessing: [cls] A [sep] (Bert: B [sep]; RoBERTa: [sep] B [sep]).
class ClsSepStep final : public Step {
 public:
  ClsSepStep(Special cls, Special sep, bool roberta, bool trim_offsets, bool add_prefix_space)
      : cls_(std::move(cls)),
        sep_(std::move(sep)),
        roberta_(roberta),
        trim_(roberta && trim_offsets),
        add_prefix_space_(add_prefix_space) {}

  [[nodiscard]] std::size_t added_tokens(bool is_pair) const override {
    return roberta_ ? (is_pair ? 4 : 2) : (is_pair ? 3 : 2);
  }
  [[nodiscard]] bool trims() const override { return trim_; }

  void process_encodings(std::vector<Enc>& encodings, bool add_special_tokens, const Texts& texts) const override {
    if (roberta_) {
      if (trim_) {
        for (Enc& e : encodings) {
          process_offsets(e, add_prefix_space_, texts);
          for (Enc& o : e.overflowing) process_offsets(o, add_prefix_space_, texts);
        }
      }
      for (Enc& e : encodings) e.set_type_ids(0);
    }
    if (!add_special_tokens) return;
    for (std::size_t i = 0; i < encodings.size(); ++i) {
      Enc& e = encodings[i];
      std::vector<Enc> overflowing = std::move(e.overflowing);
      e.overflowing.clear();
      Enc out = wrap(e, i, false);
      for (const Enc& o : overflowing) out.overflowing.push_back(wrap(o, i, true));
      e = std::move(out);
    }
  }

 private:
  [[nodiscard]] Enc wrap(const Enc& e, std::size_t i, bool is_overflowing) const {
    const bool first = i == 0;
    const Special& head = first ? cls_ : sep_;
    const bool has_head = first || roberta_;
    Enc out;
    if (has_head) append(out, special_enc(head, 0));
    const std::size_t body = out.size();
    append(out, e);
    append(out, special_enc(sep_, 0));
    // Type ids: Bert keeps the text's own (0 on the first text's specials, 1 on the pair's [SEP]);
    // RoBERTa writes 0 everywhere.
    if (!roberta_) {
      if (!first) out.type_ids.back() = 1;
    } else if (is_overflowing || !first) {
      out.set_type_ids(0);
    }
    out.ranges.push_back({first ? 0 : 1, body, body + e.size()});
    return out;
  }

  Special cls_, sep_;
  bool roberta_, trim_, add_prefix_space_;
};

// ByteLevel as a post-processor: trims offsets, adds nothing.
class ByteLevelStep final : public Step {
 public:
  ByteLevelStep(bool trim_offsets, bool add_prefix_space) : trim_(trim_offsets), add_prefix_space_(add_prefix_space) {}
  [[nodiscard]] std::size_t added_tokens(bool) const override { return 0; }
  [[nodiscard]] bool trims() const override { return trim_; }
  void process_encodings(std::vector<Enc>& encodings, bool, const Texts& texts) const override {
    if (trim_) {
      for (Enc& e : encodings) {
        process_offsets(e, add_prefix_space_, texts);
        for (Enc& o : e.overflowing) process_offsets(o, add_prefix_space_, texts);
      }
    }
    for (std::size_t i = 0; i < encodings.size(); ++i) encodings[i].set_sequence_id(static_cast<int>(i));
  }

 private:
  bool trim_, add_prefix_space_;
};

struct Piece {
  bool is_sequence = false;
  int sequence = 0;         // 0 for $A, 1 for $B
  std::size_t special = 0;  // index into the template's special tokens
  std::int32_t type_id = 0;
};

class TemplateStep final : public Step {
 public:
  TemplateStep(std::vector<Piece> single, std::vector<Piece> pair, std::vector<Special> specials)
      : single_(std::move(single)), pair_(std::move(pair)), specials_(std::move(specials)) {}

  [[nodiscard]] std::size_t added_tokens(bool is_pair) const override {
    std::size_t n = 0;
    for (const Piece& p : is_pair ? pair_ : single_) {
      if (!p.is_sequence) n += specials_[p.special].ids.size();
    }
    return n;
  }
  [[nodiscard]] bool trims() const override { return false; }

  void process_encodings(std::vector<Enc>& encodings, bool add_special_tokens, const Texts&) const override {
    if (encodings.size() != 1 && encodings.size() != 2) {
      throw Error(concat("stile: TemplateProcessing got ", encodings.size(), " encodings (it takes 1 or 2)"));
    }
    const std::vector<Piece>& pieces = encodings.size() == 2 ? pair_ : single_;
    std::vector<Enc> out;
    out.reserve(pieces.size());
    for (std::size_t k = 0; k < pieces.size(); ++k) {
      const Piece& p = pieces[k];
      if (p.is_sequence) {
        const auto i = static_cast<std::size_t>(p.sequence);
        if (i >= encodings.size()) throw Error("stile: TemplateProcessing: the template names $B for one text");
        Enc& e = encodings[i];
        e.set_type_ids(p.type_id);
        e.set_sequence_id(p.sequence);
        const bool used_later = std::any_of(pieces.begin() + static_cast<std::ptrdiff_t>(k) + 1, pieces.end(),
                                            [&p](const Piece& q) { return q.is_sequence && q.sequence == p.sequence; });
        if (used_later) {
          out.push_back(e);
        } else {
          out.push_back(std::move(e));
        }
      } else if (add_special_tokens) {
        out.push_back(special_enc(specials_[p.special], p.type_id));
      }
    }
    encodings = std::move(out);
  }

 private:
  std::vector<Piece> single_, pair_;
  std::vector<Special> specials_;
};

class SequenceStep final : public Step {
 public:
  explicit SequenceStep(std::vector<std::unique_ptr<const Step>> steps) : steps_(std::move(steps)) {}
  [[nodiscard]] std::size_t added_tokens(bool is_pair) const override {
    std::size_t n = 0;
    for (const auto& s : steps_) n += s->added_tokens(is_pair);
    return n;
  }
  [[nodiscard]] bool trims() const override {
    return std::any_of(steps_.begin(), steps_.end(), [](const auto& s) { return s->trims(); });
  }
  void process_encodings(std::vector<Enc>& encodings, bool add_special_tokens, const Texts& texts) const override {
    for (const auto& s : steps_) s->process_encodings(encodings, add_special_tokens, texts);
  }

 private:
  std::vector<std::unique_ptr<const Step>> steps_;
};

[[nodiscard]] inline std::vector<std::int32_t> sequence_ids(const Enc& e) {
  std::vector<std::int32_t> out(e.size(), -1);
  const std::size_t n = e.ranges.empty() ? 1 : e.ranges.size();
  for (std::size_t seq = 0; seq < n; ++seq) {
    std::size_t begin = 0, end = e.size();
    for (const SeqRange& r : e.ranges) {
      if (r.seq == static_cast<int>(seq)) {
        begin = r.begin;
        end = r.end;
      }
    }
    for (std::size_t i = begin; i < end && i < out.size(); ++i) out[i] = static_cast<std::int32_t>(seq);
  }
  return out;
}

[[nodiscard]] inline Encoding to_encoding(Enc&& e) {
  Encoding out;
  out.sequence_ids = sequence_ids(e);
  out.attention_mask.assign(e.size(), 1);
  out.input_ids = std::move(e.ids);
  out.token_type_ids = std::move(e.type_ids);
  out.offsets = std::move(e.offsets);
  out.special_tokens_mask = std::move(e.special);
  out.overflowing.reserve(e.overflowing.size());
  for (Enc& o : e.overflowing) out.overflowing.push_back(to_encoding(std::move(o)));
  return out;
}

// What the trims of the model's and the added tokens' ids are (built when some step trims).
class TrimTable {
 public:
  TrimTable() = default;
  TrimTable(const Model& model, const AddedVocabulary& added) {
    const std::size_t limit = std::min<std::size_t>(model.vocab_size(), std::size_t{1} << 26);
    dense_limit_ = limit + added.size() + 1;
    for (std::int32_t id = 0; id < static_cast<std::int32_t>(limit); ++id) {
      if (const auto s = model.id_to_token(id)) set(id, trim_of(*s, true));
    }
    added.for_each([this, &added](std::int32_t id, const AddedToken& t) {
      if (t.lstrip || t.rstrip) {
        Trim trim = trim_of(t.content, false);
        trim.from_text = true;
        trim.lstrip = t.lstrip;
        trim.rstrip = t.rstrip;
        trim.content_bytes = static_cast<std::uint32_t>(std::min<std::size_t>(t.content.size(), 0xFFFFFFFFu));
        set(id, trim);
      } else if (const auto pattern = added.pattern(id)) {
        std::string s;
        for (const char32_t c : *pattern) utf8::append(s, c);
        set(id, trim_of(s, false));
      }
    });
  }
  [[nodiscard]] Trim at(std::int32_t id) const {
    if (id < 0) return {};
    if (static_cast<std::size_t>(id) < trims_.size()) return trims_[static_cast<std::size_t>(id)];
    const auto it = far_.find(id);
    return it == far_.end() ? Trim{} : it->second;
  }

 private:
  void set(std::int32_t id, Trim t) {
    const auto i = static_cast<std::size_t>(id);
    if (t.lead_chars == 0 && t.trail_chars == 0 && !t.from_text) {
      if (i < trims_.size()) trims_[i] = t;
      far_.erase(id);
      return;
    }
    // Ids past the model's vocabulary (an added token's id can be any id the model has) go to a
    // map, so one far id does not make the table huge.
    if (i >= dense_limit_) {
      far_[id] = t;
      return;
    }
    if (trims_.size() <= i) trims_.resize(i + 1);
    trims_[i] = t;
  }
  std::size_t dense_limit_ = 0;
  std::vector<Trim> trims_;
  std::unordered_map<std::int32_t, Trim> far_;
};

}  // namespace post_detail

// A tokenizer.json post-processor (read_post_processor makes it). process() follows the
// reference's PostProcessor::process; process_texts() is the same with the original texts, for
// the trims of added tokens with lstrip/rstrip.
class TokenizerPostProcessor final : public PostProcessor {
 public:
  TokenizerPostProcessor(std::unique_ptr<const post_detail::Step> root, const Model& model,
                         const AddedVocabulary& added)
      : root_(std::move(root)) {
    if (root_->trims()) trims_ = std::make_unique<post_detail::TrimTable>(model, added);
  }

  [[nodiscard]] std::size_t added_tokens(bool is_pair) const override { return root_->added_tokens(is_pair); }

  [[nodiscard]] Encoding process(Encoding first, std::optional<Encoding> second,
                                 bool add_special_tokens) const override {
    return process_texts(std::move(first), std::move(second), add_special_tokens, std::nullopt, std::nullopt);
  }

  [[nodiscard]] Encoding process_texts(Encoding first, std::optional<Encoding> second, bool add_special_tokens,
                                       std::optional<std::string_view> first_text,
                                       std::optional<std::string_view> second_text) const {
    std::vector<post_detail::Enc> encodings;
    encodings.push_back(convert(std::move(first), first_text, 0));
    if (second) encodings.push_back(convert(std::move(*second), second_text, 1));
    for (std::size_t i = 0; i < encodings.size(); ++i) {
      post_detail::Enc& e = encodings[i];
      e.set_sequence_id(static_cast<int>(i));
      for (post_detail::Enc& o : e.overflowing) o.set_sequence_id(static_cast<int>(i));
      e.set_type_ids(static_cast<std::int32_t>(i));
    }
    post_detail::Texts texts;
    texts.text[0] = first_text;
    texts.text[1] = second_text;
    root_->process_encodings(encodings, add_special_tokens, texts);
    return post_detail::to_encoding(post_detail::merge(std::move(encodings)));
  }

 private:
  [[nodiscard]] post_detail::Enc convert(Encoding&& e, std::optional<std::string_view> text, std::uint8_t index) const {
    post_detail::Enc out;
    const std::size_t n = e.size();
    out.ids = std::move(e.input_ids);
    out.type_ids = std::move(e.token_type_ids);
    out.type_ids.resize(n, 0);
    out.offsets = std::move(e.offsets);
    out.offsets.resize(n);
    out.special.assign(n, 0);
    if (trims_) {
      out.trims.reserve(n);
      for (std::size_t i = 0; i < n; ++i) {
        post_detail::Trim t = trims_->at(out.ids[i]);
        const TokenOffsets o = out.offsets[i];
        if (t.from_text && text && o.begin <= o.end && o.end <= text->size()) {
          t = post_detail::trim_of(text->substr(o.begin, o.end - o.begin), false);
        } else if (t.from_text && o.end - o.begin > t.content_bytes && o.begin <= o.end) {
          // Without the text: the bytes past the content are the whitespace the token took, read
          // as one byte a character (spaces); lstrip and rstrip both: counted on the left.
          const auto extra = static_cast<unsigned>(std::min<std::uint32_t>(o.end - o.begin - t.content_bytes, 0x7FFF));
          std::uint16_t& chars = t.lstrip ? t.lead_chars : t.trail_chars;
          std::uint16_t& bytes = t.lstrip ? t.lead_bytes : t.trail_bytes;
          chars = static_cast<std::uint16_t>(std::min(chars + extra, 0xFFFFu));
          bytes = static_cast<std::uint16_t>(std::min(bytes + extra, 0xFFFFu));
        }
        if (text) t.text = index;
        out.trims.push_back(t);
      }
    }
    for (Encoding& o : e.overflowing) out.overflowing.push_back(convert(std::move(o), text, index));
    return out;
  }

  std::unique_ptr<const post_detail::Step> root_;
  std::unique_ptr<const post_detail::TrimTable> trims_;
};

// The reference's post-processing without a post_processor (default_process): one text as it
// is; a pair merged, each main encoding marked with its sequence.
[[nodiscard]] inline Encoding default_process(const Encoding& first, const std::optional<Encoding>& second) {
  const auto convert = [](const Encoding& e, const auto& self) -> post_detail::Enc {
    post_detail::Enc out;
    out.ids = e.input_ids;
    out.type_ids = e.token_type_ids;
    out.type_ids.resize(e.size(), 0);
    out.offsets = e.offsets;
    out.offsets.resize(e.size());
    out.special.assign(e.size(), 0);
    for (const Encoding& o : e.overflowing) out.overflowing.push_back(self(o, self));
    return out;
  };
  std::vector<post_detail::Enc> encodings;
  encodings.push_back(convert(first, convert));
  if (!second) return post_detail::to_encoding(std::move(encodings[0]));
  encodings.push_back(convert(*second, convert));
  for (std::size_t i = 0; i < encodings.size(); ++i) encodings[i].set_sequence_id(static_cast<int>(i));
  return post_detail::to_encoding(post_detail::merge(std::move(encodings)));
}

// The reference's post_process: truncation (max_length less the processor's added tokens when
// special tokens are added), then the processor (or default_process). `first` and `second` straight
// from the model: ids, offsets (bytes of their own text), type ids 0 and 1. The texts (optional)
// let trim_offsets see what an lstrip/rstrip added token matched (RoBERTa's <mask>: without them
// its offsets keep the space it took).
[[nodiscard]] inline Encoding post_process(const PostProcessor* processor, Encoding first,
                                           std::optional<Encoding> second, bool add_special_tokens,
                                           const std::optional<Truncation>& truncation,
                                           std::optional<std::string_view> first_text = std::nullopt,
                                           std::optional<std::string_view> second_text = std::nullopt,
                                           TruncationDirection direction = TruncationDirection::right) {
  if (truncation && truncation->max_length != kNoTruncation) {
    Truncation params = *truncation;
    const std::size_t added = processor != nullptr ? processor->added_tokens(second.has_value()) : 0;
    if (add_special_tokens && added > 0) {
      // The reference subtracts in usize, which wraps when max_length < added: then nothing is cut.
      params.max_length = params.max_length >= added ? params.max_length - added : kNoTruncation;
    }
    if (params.max_length != kNoTruncation) truncate_encodings(first, second ? &*second : nullptr, params, direction);
  }
  if (processor == nullptr) return default_process(first, second);
  if (const auto* p = dynamic_cast<const TokenizerPostProcessor*>(processor)) {
    return p->process_texts(std::move(first), std::move(second), add_special_tokens, first_text, second_text);
  }
  return processor->process(std::move(first), std::move(second), add_special_tokens);
}

namespace post_detail {

struct Reader {
  const Model& model;
  const AddedVocabulary& added;

  [[nodiscard]] const nlohmann::json& member(const nlohmann::json& j, const JsonPlace& place,
                                             std::string_view key) const {
    const auto it = j.find(key);
    if (it == j.end()) place.fail("missing \"", key, "\"");
    return *it;
  }
  [[nodiscard]] bool flag(const nlohmann::json& j, const JsonPlace& place, std::string_view key) const {
    const nlohmann::json& v = member(j, place, key);
    if (!v.is_boolean()) (place / key).fail("must be true or false, got ", json_excerpt(v));
    return v.get<bool>();
  }
  [[nodiscard]] std::int32_t id(const nlohmann::json& v, const JsonPlace& place) const {
    if (!v.is_number_unsigned() || v.get<std::uint64_t>() > 0x7FFFFFFF) {
      place.fail("must be a token id (an integer 0..2^31-1), got ", json_excerpt(v));
    }
    const auto id = static_cast<std::int32_t>(v.get<std::uint64_t>());
    if (!model.id_to_token(id) && !added.id_to_token(id)) {
      place.fail("id ", id, " is neither in the model's vocabulary nor an added token");
    }
    return id;
  }
  // ["[SEP]", 102]
  [[nodiscard]] Special token_pair(const nlohmann::json& j, const JsonPlace& place, std::string_view key) const {
    const nlohmann::json& v = member(j, place, key);
    const JsonPlace at = place / key;
    if (!v.is_array() || v.size() != 2 || !v[0].is_string()) {
      at.fail("must be [token, id] (a string and an id), got ", json_excerpt(v));
    }
    Special s;
    s.ids.push_back(id(v[1], at[1]));
    s.trims.push_back(trim_of(v[0].get_ref<const std::string&>(), true));
    return s;
  }

  [[nodiscard]] std::unique_ptr<const Step> step(const nlohmann::json& j, const JsonPlace& place) const {
    if (!j.is_object()) place.fail("must be a JSON object, got ", json_excerpt(j));
    const nlohmann::json& type = member(j, place, "type");
    if (!type.is_string()) (place / "type").fail("must be a string, got ", json_excerpt(type));
    const std::string& name = type.get_ref<const std::string&>();
    if (name == "BertProcessing" || name == "RobertaProcessing") {
      const bool roberta = j.contains("trim_offsets") && j.contains("add_prefix_space");
      Special sep = token_pair(j, place, "sep");
      Special cls = token_pair(j, place, "cls");
      const bool trim = roberta && flag(j, place, "trim_offsets");
      const bool prefix = roberta && flag(j, place, "add_prefix_space");
      return std::make_unique<ClsSepStep>(std::move(cls), std::move(sep), roberta, trim, prefix);
    }
    if (name == "ByteLevel") {
      const bool prefix = flag(j, place, "add_prefix_space");
      const bool trim = flag(j, place, "trim_offsets");
      if (j.contains("use_regex")) (void)flag(j, place, "use_regex");
      return std::make_unique<ByteLevelStep>(trim, prefix);
    }
    if (name == "TemplateProcessing") return template_step(j, place);
    if (name == "Sequence") {
      const nlohmann::json& list = member(j, place, "processors");
      const JsonPlace at = place / "processors";
      if (!list.is_array()) at.fail("must be a JSON array, got ", json_excerpt(list));
      if (list.size() > 64) at.fail("has ", list.size(), " processors (stile reads at most 64)");
      std::vector<std::unique_ptr<const Step>> steps;
      for (std::size_t i = 0; i < list.size(); ++i) steps.push_back(step(list[i], at[i]));
      return std::make_unique<SequenceStep>(std::move(steps));
    }
    (place / "type")
        .fail("\"", name,
              "\" is not supported (stile reads: BertProcessing, RobertaProcessing, ByteLevel, "
              "TemplateProcessing, Sequence)");
  }

  [[nodiscard]] std::unique_ptr<const Step> template_step(const nlohmann::json& j, const JsonPlace& place) const {
    // special_tokens: {"[CLS]": {"id": "[CLS]", "ids": [101], "tokens": ["[CLS]"]}, ...}, looked up by key.
    const nlohmann::json& map = member(j, place, "special_tokens");
    const JsonPlace map_at = place / "special_tokens";
    if (!map.is_object()) map_at.fail("must be a JSON object, got ", json_excerpt(map));
    std::vector<std::string> names;
    std::vector<Special> specials;
    for (auto it = map.begin(); it != map.end(); ++it) {
      const JsonPlace at = map_at / it.key();
      const nlohmann::json& t = it.value();
      if (!t.is_object()) at.fail("must be a JSON object, got ", json_excerpt(t));
      const nlohmann::json& tid = member(t, at, "id");
      if (!tid.is_string()) (at / "id").fail("must be a string, got ", json_excerpt(tid));
      const nlohmann::json& ids = member(t, at, "ids");
      const nlohmann::json& tokens = member(t, at, "tokens");
      if (!ids.is_array()) (at / "ids").fail("must be a JSON array of ids, got ", json_excerpt(ids));
      if (!tokens.is_array()) (at / "tokens").fail("must be a JSON array of strings, got ", json_excerpt(tokens));
      if (ids.size() != tokens.size()) {
        at.fail("\"ids\" has ", ids.size(), " entries and \"tokens\" ", tokens.size(), " (they must be as many)");
      }
      Special s;
      for (std::size_t i = 0; i < ids.size(); ++i) {
        s.ids.push_back(id(ids[i], (at / "ids")[i]));
        if (!tokens[i].is_string()) ((at / "tokens")[i]).fail("must be a string, got ", json_excerpt(tokens[i]));
        s.trims.push_back(trim_of(tokens[i].get_ref<const std::string&>(), true));
      }
      names.push_back(it.key());
      specials.push_back(std::move(s));
    }
    const auto pieces = [&](std::string_view key, bool single) {
      const nlohmann::json& list = member(j, place, key);
      const JsonPlace at = place / key;
      if (!list.is_array()) {
        at.fail("must be a JSON array of pieces ({\"Sequence\": {...}} or {\"SpecialToken\": {...}}), got ",
                json_excerpt(list));
      }
      std::vector<Piece> out;
      for (std::size_t i = 0; i < list.size(); ++i) {
        const JsonPlace pat = at[i];
        const nlohmann::json& p = list[i];
        if (!p.is_object() || p.size() != 1) {
          pat.fail(
              "must be {\"Sequence\": {\"id\": \"A\"|\"B\", \"type_id\": n}} or {\"SpecialToken\": {\"id\": "
              "name, \"type_id\": n}}, got ",
              json_excerpt(p));
        }
        const std::string& kind = p.begin().key();
        const nlohmann::json& body = p.begin().value();
        const JsonPlace bat = pat / kind;
        if (kind != "Sequence" && kind != "SpecialToken") {
          pat.fail("\"", kind, "\" is not a template piece (Sequence, SpecialToken)");
        }
        if (!body.is_object()) bat.fail("must be a JSON object, got ", json_excerpt(body));
        Piece piece;
        const nlohmann::json& type_id = member(body, bat, "type_id");
        if (!type_id.is_number_unsigned() || type_id.get<std::uint64_t>() > 0x7FFFFFFF) {
          (bat / "type_id").fail("must be a non-negative integer, got ", json_excerpt(type_id));
        }
        piece.type_id = static_cast<std::int32_t>(type_id.get<std::uint64_t>());
        const nlohmann::json& pid = member(body, bat, "id");
        if (!pid.is_string()) (bat / "id").fail("must be a string, got ", json_excerpt(pid));
        const std::string& name = pid.get_ref<const std::string&>();
        if (kind == "Sequence") {
          piece.is_sequence = true;
          if (name == "A") {
            piece.sequence = 0;
          } else if (name == "B") {
            piece.sequence = 1;
          } else {
            (bat / "id").fail("\"", name, "\" is not a sequence (A or B)");
          }
          if (single && piece.sequence == 1) {
            (bat / "id").fail("the single template takes one text: $B has nothing to refer to");
          }
        } else {
          const auto found = std::find(names.begin(), names.end(), name);
          if (found == names.end()) {
            (bat / "id").fail("special token \"", name, "\" is not in \"special_tokens\"");
          }
          piece.special = static_cast<std::size_t>(found - names.begin());
        }
        out.push_back(piece);
      }
      return out;
    };
    std::vector<Piece> single = pieces("single", true);
    std::vector<Piece> pair = pieces("pair", false);
    return std::make_unique<TemplateStep>(std::move(single), std::move(pair), std::move(specials));
  }
};

}  // namespace post_detail

// tokenizer.json's "post_processor": null -> nullptr. `model` and `added` give the ids' strings
// (checked ids, trim_offsets); they are not kept.
[[nodiscard]] inline std::unique_ptr<const PostProcessor> read_post_processor(const nlohmann::json& j,
                                                                              const JsonPlace& place,
                                                                              const Model& model,
                                                                              const AddedVocabulary& added) {
  if (j.is_null()) return nullptr;
  const post_detail::Reader reader{model, added};
  return std::make_unique<const TokenizerPostProcessor>(reader.step(j, place), model, added);
}

}  // namespace stile::tok
