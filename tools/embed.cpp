// embed: sentence embeddings (or their cosine similarities) from a sentence-transformers BERT
// model directory, computed with stile's fp32 encoder.
//
//   embed "A man is eating food." "A man is eating a piece of bread."
//   embed --similarity --format json < sentences.txt
//
// Exit status: 0 ok, 1 runtime error (bad model, unreadable input), 2 usage error.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <filesystem>
#include <iostream>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "stile/core/thread_pool.hpp"
#include "stile/io/model_cache.hpp"
#include "stile/model/sentence_encoder.hpp"

namespace {

constexpr const char* kUsage = R"(usage: embed [options] [sentence ...]

Embeds each sentence with a sentence-transformers BERT model (tokenize, encode, pool, normalize as
the model's files say). Sentences come from the arguments; with none, or where one is "-", from
standard input, one per line.

options:
  --model DIR     model directory (default: $STILE_MODEL_DIR, else ~/.cache/stile/all-MiniLM-L6-v2)
  --similarity    print the cosine similarity matrix of the sentences instead of embeddings
  --format FMT    text (default) or json
  --full          text format: print every value of each embedding, not the first 8 and the norm
  --threads N     threads to compute with (default: $STILE_NUM_THREADS, else one per core)
  --verbose       print token counts and timings to standard error
  --help          print this help
  --              the arguments after it are sentences, even those starting with "-"
)";

// Sentences are encoded this many at a time: one encode() call per chunk keeps the activations
// of a long input file bounded while still batching.
constexpr std::size_t kChunkSentences = 64;
constexpr std::size_t kPreviewValues = 8;

enum class Format { kText, kJson };

struct Options {
  std::filesystem::path model_dir;
  bool similarity = false;
  Format format = Format::kText;
  bool full = false;
  std::size_t threads = 0;  // 0: the default pool
  bool verbose = false;
  std::vector<std::string> sentences;
};

struct UsageError {
  std::string message;
};

// Appends stdin's lines (without "\n" or a "\r\n" ending) to sentences.
void read_stdin_lines(std::vector<std::string>& sentences) {
  for (std::string line; std::getline(std::cin, line);) {
    if (line.ends_with('\r')) line.pop_back();
    sentences.push_back(std::move(line));
  }
  if (std::cin.bad()) throw stile::Error("cannot read standard input");
}

std::size_t parse_threads(std::string_view text) {
  std::size_t n = 0;
  for (const char c : text) {
    if (c < '0' || c > '9' || n > 1024) throw UsageError{fmt::format("--threads wants a number from 1 to 1024, got '{}'", text)};
    n = n * 10 + static_cast<std::size_t>(c - '0');
  }
  if (n == 0 || n > 1024) throw UsageError{fmt::format("--threads wants a number from 1 to 1024, got '{}'", text)};
  return n;
}

// Returns nothing when --help was asked for.
std::optional<Options> parse_args(int argc, char** argv) {
  Options options;
  options.model_dir = stile::default_model_dir();
  bool read_stdin = false;
  bool only_sentences = false;
  std::vector<std::string_view> args(argv + 1, argv + argc);
  for (std::size_t i = 0; i < args.size(); ++i) {
    const std::string_view arg = args[i];
    const auto value = [&]() -> std::string_view {
      if (i + 1 >= args.size()) throw UsageError{fmt::format("{} needs a value", arg)};
      return args[++i];
    };
    if (only_sentences || arg.empty() || (arg[0] != '-')) {
      options.sentences.emplace_back(arg);
    } else if (arg == "-") {
      read_stdin = true;
    } else if (arg == "--") {
      only_sentences = true;
    } else if (arg == "--help" || arg == "-h") {
      return std::nullopt;
    } else if (arg == "--model") {
      options.model_dir = value();
    } else if (arg == "--similarity") {
      options.similarity = true;
    } else if (arg == "--format") {
      const std::string_view format = value();
      if (format == "text") {
        options.format = Format::kText;
      } else if (format == "json") {
        options.format = Format::kJson;
      } else {
        throw UsageError{fmt::format("--format wants text or json, got '{}'", format)};
      }
    } else if (arg == "--full") {
      options.full = true;
    } else if (arg == "--threads") {
      options.threads = parse_threads(value());
    } else if (arg == "--verbose" || arg == "-v") {
      options.verbose = true;
    } else {
      throw UsageError{fmt::format("unknown option '{}'", arg)};
    }
  }
  // Arguments first, then stdin's lines (where "-" was, or when there are no arguments).
  if (read_stdin || options.sentences.empty()) read_stdin_lines(options.sentences);
  return options;
}

double norm(std::span<const float> v) {
  double sum = 0.0;
  for (const float x : v) sum += double(x) * x;
  return std::sqrt(sum);
}

double cosine(std::span<const float> a, std::span<const float> b) {
  double dot = 0.0;
  for (std::size_t i = 0; i < a.size(); ++i) dot += double(a[i]) * b[i];
  const double norms = norm(a) * norm(b);
  return norms > 0.0 ? dot / norms : 0.0;
}

// Keys in the order written ("text" before "embedding"). Texts can be any bytes: ill-formed
// UTF-8 is written as U+FFFD instead of failing.
std::string to_json(const nlohmann::ordered_json& value) {
  return value.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace);
}

void print_embeddings(const Options& options, const std::vector<std::vector<float>>& embeddings) {
  if (options.format == Format::kJson) {
    fmt::print("[");
    for (std::size_t i = 0; i < embeddings.size(); ++i) {
      const nlohmann::ordered_json row = {{"text", options.sentences[i]}, {"embedding", embeddings[i]}};
      fmt::print("{}\n{}", i == 0 ? "" : ",", to_json(row));
    }
    fmt::print("{}]\n", embeddings.empty() ? "" : "\n");
    return;
  }
  for (const std::vector<float>& e : embeddings) {
    if (options.full) {
      fmt::print("{:.6f}\n", fmt::join(e, " "));
    } else {
      const std::span<const float> preview(e.data(), std::min(e.size(), kPreviewValues));
      fmt::print("{:+.6f} ... ({} values, norm {:.6f})\n", fmt::join(preview, " "), e.size(), norm(e));
    }
  }
}

void print_similarity(const Options& options, const std::vector<std::vector<float>>& embeddings) {
  // float: the embeddings' own precision, and short JSON numbers.
  std::vector<std::vector<float>> matrix(embeddings.size(), std::vector<float>(embeddings.size()));
  for (std::size_t i = 0; i < embeddings.size(); ++i) {
    for (std::size_t j = 0; j < embeddings.size(); ++j) {
      matrix[i][j] = static_cast<float>(cosine(embeddings[i], embeddings[j]));
    }
  }
  if (options.format == Format::kJson) {
    fmt::print("{}\n", to_json({{"texts", options.sentences}, {"similarity", matrix}}));
    return;
  }
  for (const std::vector<float>& row : matrix) fmt::print("{:7.4f}\n", fmt::join(row, " "));
}

int run(const Options& options) {
  using Clock = std::chrono::steady_clock;
  const auto ms_since = [](Clock::time_point start) {
    return std::chrono::duration<double, std::milli>(Clock::now() - start).count();
  };

  const auto load_start = Clock::now();
  const stile::SentenceEncoder encoder = stile::SentenceEncoder::load(options.model_dir);
  if (options.verbose) {
    fmt::print(stderr, "embed: loaded {} in {:.1f} ms (dim {}, max {} tokens)\n", options.model_dir.string(),
               ms_since(load_start), encoder.dim(), encoder.config().max_seq_length);
  }
  std::unique_ptr<stile::ThreadPool> pool;
  if (options.threads != 0) pool = std::make_unique<stile::ThreadPool>(options.threads);

  std::vector<std::vector<float>> embeddings;
  embeddings.reserve(options.sentences.size());
  std::size_t tokens = 0;
  double tokenize_ms = 0.0;
  double encode_ms = 0.0;
  for (std::size_t first = 0; first < options.sentences.size(); first += kChunkSentences) {
    const std::size_t count = std::min(kChunkSentences, options.sentences.size() - first);
    const auto tokenize_start = Clock::now();
    std::vector<stile::Encoding> batch;
    for (std::size_t i = first; i < first + count; ++i) {
      batch.push_back(encoder.tokenizer().encode(options.sentences[i]));
      tokens += batch.back().size();
    }
    tokenize_ms += ms_since(tokenize_start);
    const auto encode_start = Clock::now();
    for (std::vector<float>& e : encoder.embed_encoded(batch, pool.get())) embeddings.push_back(std::move(e));
    encode_ms += ms_since(encode_start);
  }
  if (options.verbose) {
    fmt::print(stderr, "embed: {} sentences, {} tokens: tokenize {:.2f} ms, encode {:.2f} ms ({:.0f} tokens/s)\n",
               options.sentences.size(), tokens, tokenize_ms, encode_ms,
               encode_ms > 0.0 ? 1000.0 * static_cast<double>(tokens) / encode_ms : 0.0);
  }

  if (options.similarity) {
    print_similarity(options, embeddings);
  } else {
    print_embeddings(options, embeddings);
  }
  std::fflush(stdout);
  if (std::ferror(stdout)) throw stile::Error("cannot write the output");
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    const std::optional<Options> options = parse_args(argc, argv);
    if (!options) {
      fmt::print("{}", kUsage);
      return 0;
    }
    return run(*options);
  } catch (const UsageError& e) {
    fmt::print(stderr, "embed: {}\n(see embed --help)\n", e.message);
    return 2;
  } catch (const std::exception& e) {
    fmt::print(stderr, "embed: {}\n", e.what());
    return 1;
  }
}
