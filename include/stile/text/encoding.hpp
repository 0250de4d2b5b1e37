#pragma once
// What a tokenizer gives for one text or one pair of texts: the inputs of an encoder model, and
// where each token came from in the text. Every tokenizer of stile fills it: the tokenizer.json
// pipeline (tokenizer.hpp) and the vocab.txt WordPiece (wordpiece.hpp).
#include <cstddef>
#include <cstdint>
#include <limits>
#include <vector>

namespace stile {

// A token's place in the text it came from: bytes [begin, end) of that text (of the first or the
// second text of a pair, as token_type_ids and sequence_ids say). Special tokens added around the
// texts have {0, 0}, as in Hugging Face's tokenizers.
struct TokenOffsets {
  std::uint32_t begin = 0;
  std::uint32_t end = 0;
  friend bool operator==(const TokenOffsets&, const TokenOffsets&) = default;
};

// A tokenized sequence, the inputs of an encoder model, all of the same length.
struct Encoding {
  std::vector<std::int32_t> input_ids;
  std::vector<std::int32_t> token_type_ids;  // 0 for the first text, 1 for the second of a pair
  std::vector<std::int32_t> attention_mask;  // 1 for tokens, 0 for padding
  // Filled by the tokenizer.json pipeline, one entry per token (empty from the vocab.txt
  // WordPiece, which does not track them):
  std::vector<TokenOffsets> offsets;           // bytes of the token's text; {0, 0} for special tokens
  std::vector<std::uint8_t> special_tokens_mask;  // 1 for tokens the post-processor added
  std::vector<std::int32_t> sequence_ids;      // 0 or 1: the text of the pair; -1 for added tokens
  // With truncation and a stride, the windows after the first (Hugging Face's "overflowing"), each
  // a whole encoding with its special tokens.
  std::vector<Encoding> overflowing;

  [[nodiscard]] std::size_t size() const noexcept { return input_ids.size(); }
};

enum class InvalidUtf8 {
  replace,  // read each ill-formed sequence as U+FFFD (the default)
  error,    // throw stile::Error naming the byte offset
};

enum class Padding {
  none,     // each encoding keeps its own length
  longest,  // pad every encoding of the batch to the longest one, on the right
};

// max_length value that turns truncation off.
inline constexpr std::size_t kNoTruncation = std::numeric_limits<std::size_t>::max();

// How a text, or a pair, is cut to max_length tokens (Hugging Face's TruncationParams, direction
// right): longest_first takes tokens from the longer text first; only_first / only_second cut
// just that text. With a stride, the tokens cut off become overflowing windows that repeat the
// last `stride` tokens of the window before them.
enum class TruncationStrategy { longest_first, only_first, only_second };

struct Truncation {
  std::size_t max_length = kNoTruncation;  // tokens, special tokens included
  std::size_t stride = 0;
  TruncationStrategy strategy = TruncationStrategy::longest_first;
};

}  // namespace stile
