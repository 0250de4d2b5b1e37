#pragma once
// The four kinds of part a tokenizer.json pipeline is built from, as interfaces, and how their
// readers report errors. Each implementation is a small type in its own header:
//   normalizers.hpp      Normalizer     NormalizedString -> NormalizedString
//   pre_tokenizers.hpp   PreTokenizer   PreTokenizedString -> finer splits
//   wordpiece_model.hpp, bpe_model.hpp, unigram_model.hpp
//                        Model          one split's code points -> tokens
//   post_processors.hpp  PostProcessor  the tokens of one text or a pair -> the model's inputs
// tokenizer.hpp runs them in the reference's order; tokenizer_json.hpp reads a tokenizer.json.
//
// Contract for every part: built once from its JSON, then const; a const part may be used from
// many threads at once. Anything the part does not implement (a type, an option value) is refused
// when it is read, never ignored.
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "stile/io/json_fields.hpp"
#include "stile/text/encoding.hpp"
#include "stile/text/pre_tokenized_string.hpp"

namespace stile::tok {

// Where a part's JSON sits, for error messages: the file, and the path inside it
// ("normalizer.normalizers[2]"). Errors read "stile: <file>: <path>: <problem>" (json_fail).
struct JsonPlace {
  std::string_view file;
  std::string path;

  [[nodiscard]] JsonPlace operator/(std::string_view key) const {
    return {file, path.empty() ? std::string(key) : concat(path, ".", key)};
  }
  [[nodiscard]] JsonPlace operator[](std::size_t index) const { return {file, concat(path, "[", index, "]")}; }
  template <class... Parts>
  [[noreturn]] void fail(const Parts&... parts) const {
    json_fail(file, path, parts...);
  }
};

class Normalizer {
 public:
  virtual ~Normalizer() = default;
  virtual void normalize(NormalizedString& text) const = 0;
};

class PreTokenizer {
 public:
  virtual ~PreTokenizer() = default;
  virtual void pre_tokenize(PreTokenizedString& text) const = 0;
};

class Model {
 public:
  virtual ~Model() = default;
  // Appends the tokens of one split (its normalized code points, not empty) to out, each with the
  // code points [begin, end) of `piece` it covers.
  virtual void tokenize(std::u32string_view piece, std::vector<Token>& out) const = 0;
  [[nodiscard]] virtual std::optional<std::int32_t> token_to_id(std::string_view token) const = 0;
  [[nodiscard]] virtual std::optional<std::string_view> id_to_token(std::int32_t id) const = 0;
  // The number of tokens (the reference's get_vocab_size: new added tokens take ids from it).
  [[nodiscard]] virtual std::size_t vocab_size() const = 0;
  // One past the largest id: vocab_size() unless the ids have holes (the reference allows them).
  [[nodiscard]] virtual std::size_t id_end() const = 0;
  // The unknown token's id; nullopt when the model has none (or its unk_token is not in the vocab).
  [[nodiscard]] virtual std::optional<std::int32_t> unk_id() const = 0;
  // The mark of a token that continues a word ("##" for WordPiece); "" when the model has none.
  [[nodiscard]] virtual std::string_view continuing_subword_prefix() const = 0;
};

class PostProcessor {
 public:
  virtual ~PostProcessor() = default;
  // How many special tokens process() adds to one text (is_pair false) or to a pair.
  [[nodiscard]] virtual std::size_t added_tokens(bool is_pair) const = 0;
  // The model's inputs from the (already truncated) tokens of one text or of a pair: special
  // tokens added when add_special_tokens, type ids set, the pair merged, overflowing windows
  // processed the same way. `first` and `second` come with ids, offsets and type ids (0 for the
  // first text, 1 for the second) filled, the rest empty.
  [[nodiscard]] virtual Encoding process(Encoding first, std::optional<Encoding> second,
                                         bool add_special_tokens) const = 0;
};

}  // namespace stile::tok
