#pragma once
// tokenizer.json's "Unigram" model (the reference's models/unigram/model.rs encode_optimized and
// tokenize, trie.rs, serialization.rs): the best-scoring segmentation of a piece into vocab
// pieces, by Viterbi over the piece's positions.
//
// Exactly the reference's rules:
//   - from each start (ascending), every vocab piece that is a prefix there (shortest first)
//     offers best[start] + score to best[end], taken only when strictly better (or the first
//     offer), so ties keep the earlier start, then the shorter piece;
//   - a start where no one-character piece matches also offers unk with min_score - 10 to the
//     next character (after the pieces; an error if there is no unk_id and it is taken);
//   - on the best path, runs of unk_id nodes are fused into one string; a string is then its
//     vocab id, or (byte_fallback) one "<0xNN>" token per UTF-8 byte, each covering the whole
//     string, or unk_id.
// The reference searches a byte trie and indexes bytes; a vocab piece is valid UTF-8, so it
// matches at a character boundary exactly when its code points match: the same lattice, indexed
// by code points here. Duplicate pieces: the last one's id and score, as the reference's map.
// Pieces seen before come from a per-thread cache (model_vocab.hpp's PieceCache), as the
// reference caches encoded strings: Viterbi is deterministic, so the tokens are the same.
#include <array>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "stile/text/model_vocab.hpp"
#include "stile/text/tokenizer_parts.hpp"

namespace stile::tok {

class UnigramModel final : public Model {
 public:
  static constexpr double kUnkPenalty = 10.0;

  UnigramModel(std::vector<std::pair<std::string, double>> vocab, std::optional<std::uint64_t> unk_id,
               bool byte_fallback, const JsonPlace& place)
      : pieces_(std::move(vocab)), byte_fallback_(byte_fallback) {
    using namespace model_detail;
    if (unk_id) {
      if (pieces_.empty()) (place / "vocab").fail("Unigram vocab is empty but unk_id is set");
      if (*unk_id >= pieces_.size()) {
        (place / "unk_id").fail("Unigram unk_id ", *unk_id, " is not in the vocab (", pieces_.size(), " pieces)");
      }
      unk_id_ = static_cast<std::int32_t>(*unk_id);
    }
    std::u32string cps;
    for (std::size_t id = 0; id < pieces_.size(); ++id) {
      const auto& [piece, score] = pieces_[id];
      ids_.insert_or_assign(piece, static_cast<std::int32_t>(id));
      min_score_ = std::min(min_score_, score);
      scores_.push_back(score);
      if (!decode_utf8(piece, cps)) (place / "vocab")[id].fail("Unigram piece is not valid UTF-8");
      trie_.insert(cps, static_cast<std::int32_t>(id));  // a later duplicate replaces it, as the map
    }
    byte_ids_ = byte_token_ids([&](std::string_view name) -> std::optional<std::int32_t> {
      const auto it = ids_.find(name);
      if (it == ids_.end()) return std::nullopt;
      return it->second;
    });
  }

  // Reads {"type": "Unigram", "vocab": [[piece, score], ...], "unk_id": id or null,
  // "byte_fallback": bool}: vocab required (other keys are ignored, as the reference does).
  [[nodiscard]] static UnigramModel from_json(const nlohmann::json& j, const JsonPlace& place) {
    using namespace model_detail;
    if (!j.is_object()) place.fail("Unigram model must be a JSON object, got ", json_excerpt(j));
    const auto vocab_it = j.find("vocab");
    if (vocab_it == j.end()) place.fail("Unigram model: missing \"vocab\"");
    const nlohmann::json& v = *vocab_it;
    const JsonPlace vplace = place / "vocab";
    if (!v.is_array()) vplace.fail("must be a JSON array of [piece, score], got ", json_excerpt(v));
    if (v.size() > kMaxEntries) vplace.fail("has ", v.size(), " entries, more than ", kMaxEntries, " (absurd)");
    std::vector<std::pair<std::string, double>> vocab;
    vocab.reserve(v.size());
    for (std::size_t i = 0; i < v.size(); ++i) {
      const nlohmann::json& e = v[i];
      if (!e.is_array() || e.size() != 2 || !e[0].is_string() || !e[1].is_number()) {
        vplace[i].fail("must be [piece, score] (a string and a number), got ", json_excerpt(e));
      }
      const double score = e[1].get<double>();
      if (!std::isfinite(score)) vplace[i].fail("score must be finite, got ", json_excerpt(e[1]));
      // As the reference reads it (its reader can be an ulp off; ties in Viterbi depend on it).
      vocab.emplace_back(e[0].get<std::string>(), e[1].is_number_float() ? serde_json_f64(score) : score);
    }
    std::optional<std::uint64_t> unk_id;
    if (const auto it = j.find("unk_id"); it != j.end() && !it->is_null()) {
      unk_id = read_whole(*it, kMaxId, place / "unk_id");
    }
    bool byte_fallback = false;
    if (const auto it = j.find("byte_fallback"); it != j.end()) byte_fallback = read_bool(*it, place / "byte_fallback");
    return UnigramModel(std::move(vocab), unk_id, byte_fallback, place);
  }

  void tokenize(std::u32string_view piece, std::vector<Token>& out) const override {
    const std::size_t n = piece.size();
    if (n == 0) return;
    if (use_cache_ && cache_.lookup(piece, out)) return;
    const std::size_t first = out.size();
    viterbi(piece, out);
    if (use_cache_) cache_.store(piece, out.data() + first, out.size() - first);
  }

  // Turns the per-thread cache of pieces off (before the model is shared): for measuring it.
  void disable_cache() noexcept { use_cache_ = false; }

 private:
  void viterbi(std::u32string_view piece, std::vector<Token>& out) const {
    const std::size_t n = piece.size();
    thread_local std::vector<Node> best;
    best.assign(n + 1, Node{});
    const double unk_score = min_score_ - kUnkPenalty;
    for (std::size_t start = 0; start < n; ++start) {
      const double base = best[start].score;
      bool has_single = false;
      trie_.for_each_prefix(piece.substr(start), [&](std::size_t length, std::int32_t id) {
        Node& target = best[start + length];
        const double candidate = scores_[static_cast<std::size_t>(id)] + base;
        if (target.start < 0 || candidate > target.score) target = {candidate, id, static_cast<std::int32_t>(start)};
        if (length == 1) has_single = true;
      });
      if (!has_single) {
        Node& target = best[start + 1];
        const double candidate = unk_score + base;
        if (target.start < 0 || candidate > target.score) {
          if (!unk_id_) {
            throw Error("stile: Unigram model: a character matches no piece and the model has no unk_id");
          }
          target = {candidate, *unk_id_, static_cast<std::int32_t>(start)};
        }
      }
    }
    // The best path backwards, then forwards with unk runs fused.
    thread_local std::vector<std::pair<std::uint32_t, std::int32_t>> path;  // (start, id), end = next start
    path.clear();
    for (std::size_t end = n; end > 0;) {
      const Node& node = best[end];
      if (node.start < 0) throw Error("stile: Unigram model: no path covers the piece");  // cannot happen
      path.emplace_back(static_cast<std::uint32_t>(node.start), node.id);
      end = static_cast<std::size_t>(node.start);
    }
    const auto count = path.size();
    for (std::size_t k = count; k > 0;) {
      --k;
      const std::uint32_t begin = path[k].first;
      const std::int32_t id = path[k].second;
      if (!unk_id_ || id != *unk_id_) {
        const std::uint32_t end = k == 0 ? static_cast<std::uint32_t>(n) : path[k - 1].first;
        out.push_back({id, begin, end});
        continue;
      }
      while (k > 0 && path[k - 1].second == *unk_id_) --k;  // the run of unk nodes
      const std::uint32_t end = k == 0 ? static_cast<std::uint32_t>(n) : path[k - 1].first;
      push_string(piece.substr(begin, end - begin), begin, end, out);
    }
  }

 public:
  [[nodiscard]] std::optional<std::int32_t> token_to_id(std::string_view token) const override {
    const auto it = ids_.find(token);
    if (it == ids_.end()) return std::nullopt;
    return it->second;
  }
  [[nodiscard]] std::optional<std::string_view> id_to_token(std::int32_t id) const override {
    if (id < 0 || static_cast<std::size_t>(id) >= pieces_.size()) return std::nullopt;
    return std::string_view(pieces_[static_cast<std::size_t>(id)].first);
  }
  [[nodiscard]] std::size_t vocab_size() const override { return pieces_.size(); }
  [[nodiscard]] std::size_t id_end() const override { return pieces_.size(); }  // ids are the pieces' places
  [[nodiscard]] std::optional<std::int32_t> unk_id() const override { return unk_id_; }
  [[nodiscard]] std::string_view continuing_subword_prefix() const override { return {}; }
  [[nodiscard]] bool byte_fallback() const noexcept { return byte_fallback_; }
  [[nodiscard]] double score(std::int32_t id) const { return pieces_.at(static_cast<std::size_t>(id)).second; }

 private:
  struct Node {
    double score = 0.0;  // the reference's default, also for a position no path reaches
    std::int32_t id = 0;
    std::int32_t start = -1;
  };

  // The reference's tokenize for one string of the encoded path (a fused unk run here).
  void push_string(std::u32string_view text, std::uint32_t begin, std::uint32_t end, std::vector<Token>& out) const {
    thread_local std::string bytes;
    bytes.clear();
    model_detail::append_utf8(bytes, text);
    if (const auto it = ids_.find(std::string_view(bytes)); it != ids_.end()) {
      out.push_back({it->second, begin, end});
      return;
    }
    if (byte_fallback_) {
      bool all = true;
      for (const char b : bytes) all = all && byte_ids_[static_cast<unsigned char>(b)] >= 0;
      if (all) {
        for (const char b : bytes) out.push_back({byte_ids_[static_cast<unsigned char>(b)], begin, end});
        return;
      }
    }
    out.push_back({*unk_id_, begin, end});
  }

  std::vector<std::pair<std::string, double>> pieces_;
  model_detail::IdMap ids_;
  model_detail::CodeTrie trie_;
  std::vector<double> scores_;  // pieces_'s scores, compact: the Viterbi loop reads them
  double min_score_ = std::numeric_limits<double>::infinity();
  std::optional<std::int32_t> unk_id_;
  bool byte_fallback_ = false;
  std::array<std::int32_t, 256> byte_ids_{};
  model_detail::PieceCache cache_;
  bool use_cache_ = true;
};

}  // namespace stile::tok
