#pragma once
// A WordPiece vocabulary: BERT's vocab.txt, one token per line, the line number (from 0) is the id.
//
// Read the way Hugging Face's load_vocab reads it (Python text mode, UTF-8):
//   - lines end at "\n", "\r\n" or a lone "\r"; text after the last line end is a last line;
//   - a token is the whole line: no trimming, and an empty line is an (unreachable) empty token;
//   - a token listed twice maps to its last id (a dict filled line by line); the earlier id keeps
//     its line, so ids stay aligned with the model's embedding rows.
// Validated: the file is readable and not empty, every line is UTF-8, there are fewer than 2^31
// lines, and BERT's [CLS] [SEP] [UNK] [PAD] are present. Failures throw stile::Error naming the
// file (and the line).
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <limits>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "stile/core/file_error.hpp"
#include "stile/text/utf8.hpp"

namespace stile {

class Vocab {
 public:
  // WordPiece marks a piece that continues a word with this prefix ("##ing").
  static constexpr std::string_view kContinuationPrefix = "##";
  // Special tokens every BERT vocabulary must have.
  static constexpr std::string_view kRequiredTokens[] = {"[CLS]", "[SEP]", "[UNK]", "[PAD]"};

  // Reads a vocab.txt file.
  [[nodiscard]] static Vocab load(const std::filesystem::path& file) {
    const std::string name = file.string();
    std::ifstream stream(file, std::ios::binary);
    if (!stream) fail_in_file(name, "cannot open the vocabulary file");
    std::string contents{std::istreambuf_iterator<char>(stream), std::istreambuf_iterator<char>()};
    if (stream.bad()) fail_in_file(name, "read error");
    return parse(contents, name);
  }

  // Parses the contents of a vocab.txt; source names it in error messages.
  [[nodiscard]] static Vocab parse(std::string_view contents, std::string_view source) {
    Vocab vocab;
    vocab.source_ = source;
    if (contents.empty()) fail_in_file(source, "the vocabulary file is empty");
    std::size_t line_begin = 0;
    while (line_begin < contents.size()) {
      std::size_t line_end = contents.find_first_of("\r\n", line_begin);
      std::size_t next = line_end;
      if (line_end == std::string_view::npos) {
        line_end = next = contents.size();
      } else {
        next =
            line_end +
            ((contents[line_end] == '\r' && line_end + 1 < contents.size() && contents[line_end + 1] == '\n') ? 2 : 1);
      }
      vocab.add_line(contents.substr(line_begin, line_end - line_begin));
      line_begin = next;
    }
    for (const std::string_view required : kRequiredTokens) {
      if (!vocab.find(required)) {
        fail_in_file(source, "the vocabulary has no ", required, " token (is this a BERT WordPiece vocab.txt?)");
      }
    }
    return vocab;
  }

  [[nodiscard]] std::size_t size() const noexcept { return tokens_.size(); }
  [[nodiscard]] const std::string& source() const noexcept { return source_; }

  // The id of token, if the vocabulary has it.
  [[nodiscard]] std::optional<std::int32_t> find(std::string_view token) const {
    const auto it = ids_.find(token);
    if (it == ids_.end()) return std::nullopt;
    return it->second;
  }
  // The id of "##" + piece, without building that string.
  [[nodiscard]] std::optional<std::int32_t> find_continuation(std::string_view piece) const {
    const auto it = continuation_ids_.find(piece);
    if (it == continuation_ids_.end()) return std::nullopt;
    return it->second;
  }
  // The id of a token the vocabulary must have (throws naming the file otherwise).
  [[nodiscard]] std::int32_t id_of(std::string_view token) const {
    const auto id = find(token);
    if (!id) fail_in_file(source_, "the vocabulary has no ", token, " token");
    return *id;
  }
  // The token of an id (the line's text).
  [[nodiscard]] const std::string& token(std::int32_t id) const {
    if (id < 0 || static_cast<std::size_t>(id) >= tokens_.size()) {
      fail_in_file(source_, "token id ", id, " is out of range (the vocabulary has ", tokens_.size(), " tokens)");
    }
    return tokens_[static_cast<std::size_t>(id)];
  }

  // Longest token in bytes (no piece longer than this can match), and the same for continuation
  // pieces without their "##".
  [[nodiscard]] std::size_t longest_token_bytes() const noexcept { return longest_token_bytes_; }
  [[nodiscard]] std::size_t longest_continuation_bytes() const noexcept { return longest_continuation_bytes_; }

 private:
  // Heterogeneous lookup: find() takes a string_view into the word being tokenized, no copy.
  struct StringHash {
    using is_transparent = void;
    [[nodiscard]] std::size_t operator()(std::string_view text) const noexcept {
      return std::hash<std::string_view>{}(text);
    }
  };
  using IdMap = std::unordered_map<std::string, std::int32_t, StringHash, std::equal_to<>>;

  Vocab() = default;

  void add_line(std::string_view token) {
    const std::size_t line = tokens_.size() + 1;
    if (tokens_.size() >= static_cast<std::size_t>(std::numeric_limits<std::int32_t>::max())) {
      fail_in_file(source_, "line ", line, ": too many tokens for 32-bit ids");
    }
    if (const std::size_t bad = utf8::find_invalid(token); bad != std::string_view::npos) {
      fail_in_file(source_, "line ", line, ": not valid UTF-8 (at byte ", bad + 1, " of the line)");
    }
    const auto id = static_cast<std::int32_t>(tokens_.size());
    tokens_.emplace_back(token);
    ids_.insert_or_assign(std::string(token), id);  // a duplicate keeps its last id, as in HF
    longest_token_bytes_ = std::max(longest_token_bytes_, token.size());
    if (token.starts_with(kContinuationPrefix)) {
      const std::string_view piece = token.substr(kContinuationPrefix.size());
      continuation_ids_.insert_or_assign(std::string(piece), id);
      longest_continuation_bytes_ = std::max(longest_continuation_bytes_, piece.size());
    }
  }

  std::string source_;
  std::vector<std::string> tokens_;
  IdMap ids_;
  IdMap continuation_ids_;  // "##ing" is stored under "ing"
  std::size_t longest_token_bytes_ = 0;
  std::size_t longest_continuation_bytes_ = 0;
};

}  // namespace stile
