// embed: sentence embeddings (or their cosine similarities, or their tokens) from a
// sentence-transformers model directory, computed with stile's fp32 encoder.
//
//   embed "A man is eating food." "A man is eating a piece of bread."
//   embed --similarity --format json < sentences.txt
//   embed --tokens "A man is playing a guitar."
//
// Exit status: 0 ok, 1 runtime error (bad model, unreadable input), 2 usage error.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstddef>
#include <cstdint>
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

#include "cli.hpp"
#include "stile/hetero/mapped_forward.hpp"
#include "stile/hetero/processor_set.hpp"
#include "stile/plan/mapping_file.hpp"
#include "stile/core/thread_pool.hpp"
#include "stile/io/model_cache.hpp"
#include "stile/model/sentence_encoder.hpp"

namespace {

// Sentences are encoded this many at a time: one encode() call per chunk keeps the activations
// of a long input file bounded while still batching.
constexpr std::size_t kChunkSentences = 64;
constexpr std::size_t kPreviewValues = 8;

enum class Format { kText, kJson };

struct Options {
  std::filesystem::path model_dir;
  bool similarity = false;
  bool tokens = false;
  Format format = Format::kText;
  bool full = false;
  std::size_t threads = 0;  // 0: the default pool
  bool verbose = false;
  std::string precision = "fp32";  // a preset of ops/precision.hpp
  std::filesystem::path mapping;   // a mapping file (tools/search_mapping) in place of the preset
  std::optional<std::string> prompt_name;  // one of the model's prompts; none: its default prompt, if any
  std::optional<std::size_t> stride;       // windows over a long text (SentenceEncoder::embed_long); none: truncate
  std::vector<std::string> sentences;
};

// Appends stdin's lines (without "\n" or a "\r\n" ending) to sentences.
void read_stdin_lines(std::vector<std::string>& sentences) {
  for (std::string line; std::getline(std::cin, line);) {
    if (line.ends_with('\r')) line.pop_back();
    sentences.push_back(std::move(line));
  }
  if (std::cin.bad()) throw stile::Error("cannot read standard input");
}

Options parse_args(int argc, char** argv) {
  Options options;
  options.model_dir = stile::default_model_dir();
  std::string format = "text";
  stile_cli::Parser cli("embed", "[options] [sentence ...]",
                        "Embeds each sentence with a sentence-transformers model (tokenize, encode, pool, Dense, "
                        "normalize as the model's files say). Sentences come from the arguments; with none, or where "
                        "one is \"-\", from standard input, one per line.");
  cli.flag("--model", "DIR", "model directory (default: $STILE_MODEL_DIR, else ~/.cache/stile/all-MiniLM-L6-v2)",
           options.model_dir);
  cli.toggle("--similarity", "print the cosine similarity matrix of the sentences instead of embeddings",
             options.similarity);
  cli.toggle("--tokens",
             "print each sentence's tokens instead of embeddings: the pieces, their ids and the bytes of the sentence "
             "each came from (json: arrays \"tokens\", \"ids\" and \"offsets\"), to check the tokenizer against "
             "another",
             options.tokens);
  cli.flag("--format", "FMT", "text or json", format).one_of({"text", "json"});
  cli.toggle("--full", "text format: print every value of each embedding, not the first 8 and the norm", options.full);
  cli.threads(options.threads, "threads to compute with (default: $STILE_NUM_THREADS, else one per core)");
  cli.precision(options.precision);
  cli.flag("--mapping", "FILE",
           "a processor and a format per operator from a mapping file (tools/search_mapping) instead of --precision: "
           "one processor runs on the CPU engine; several (cpu:N cores, opencl:N devices) on the processor runtime",
           options.mapping);
  std::string prompt_name;
  cli.flag("--prompt-name", "NAME",
           "put the model's prompt NAME (config_sentence_transformers.json's \"prompts\", e.g. query) before each "
           "sentence; default: the model's default_prompt_name, if it has one",
           prompt_name);
  cli.flag("--stride", "N",
           "embed a text longer than the model's length from all of it: windows of the model's length that repeat "
           "the last N tokens of the window before, their embeddings averaged by token count (and normalized again "
           "when the model normalizes); default: truncate, as sentence-transformers does",
           [&](std::string_view v) { options.stride = stile_cli::parse_whole(v, "--stride"); });
  cli.toggle("--verbose", "print token counts and timings to standard error", options.verbose).short_name("-v");
  cli.example("embed \"A man is playing a guitar.\" \"Someone plays an instrument.\"");
  cli.example("embed --similarity < sentences.txt", "the cosine matrix of one sentence a line");
  cli.example("embed --tokens \"A man is playing a guitar.\"", "pieces, ids and byte offsets");
  const std::vector<std::string> args = cli.parse(argc, argv);
  if (options.similarity && options.tokens) cli.fail("--similarity and --tokens do not go together");
  if (options.stride && (options.tokens || !options.mapping.empty())) {
    cli.fail("--stride does not go with --tokens or --mapping");
  }
  options.format = format == "json" ? Format::kJson : Format::kText;
  if (!prompt_name.empty()) options.prompt_name = prompt_name;
  // Arguments first, then stdin's lines (where "-" was before any "--", or when there are no
  // arguments).
  bool read_stdin = false;
  for (std::size_t i = 0; i < args.size(); ++i) {
    if (args[i] == "-" && i < cli.literal_from()) {
      read_stdin = true;
    } else {
      options.sentences.push_back(args[i]);
    }
  }
  if (read_stdin || options.sentences.empty()) read_stdin_lines(options.sentences);
  return options;
}

double norm(std::span<const float> v) {
  double sum = 0.0;
  for (const float x : v) sum += double(x) * x;
  return std::sqrt(sum);
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

// Each sentence's tokens, special tokens included: "piece id begin end" per line (text; begin and
// end are the bytes of the sentence the token came from, 0 0 for special tokens), or
// {"text", "tokens", "ids", "offsets"} (json).
void print_tokens(const Options& options, const stile::Tokenizer& tokenizer,
                  const std::vector<stile::Encoding>& encodings) {
  const auto pieces = [&](const stile::Encoding& e) {
    std::vector<std::string> out;
    for (const std::int32_t id : e.input_ids) out.emplace_back(tokenizer.id_to_token(id).value_or("<unknown id>"));
    return out;
  };
  if (options.format == Format::kJson) {
    fmt::print("[");
    for (std::size_t i = 0; i < encodings.size(); ++i) {
      nlohmann::ordered_json offsets = nlohmann::ordered_json::array();
      for (const stile::TokenOffsets& o : encodings[i].offsets) offsets.push_back({o.begin, o.end});
      const nlohmann::ordered_json row = {{"text", options.sentences[i]},
                                          {"tokens", pieces(encodings[i])},
                                          {"ids", encodings[i].input_ids},
                                          {"offsets", offsets}};
      fmt::print("{}\n{}", i == 0 ? "" : ",", to_json(row));
    }
    fmt::print("{}]\n", encodings.empty() ? "" : "\n");
    return;
  }
  for (std::size_t i = 0; i < encodings.size(); ++i) {
    const stile::Encoding& e = encodings[i];
    fmt::print("{}{} ({} tokens)\n", i == 0 ? "" : "\n", options.sentences[i], e.size());
    const std::vector<std::string> p = pieces(e);
    for (std::size_t t = 0; t < p.size(); ++t) {
      fmt::print("{} {} {} {}\n", p[t], e.input_ids[t], e.offsets[t].begin, e.offsets[t].end);
    }
  }
}

void print_similarity(const Options& options, const std::vector<std::vector<float>>& embeddings) {
  // float: the embeddings' own precision, and short JSON numbers.
  std::vector<std::vector<float>> matrix(embeddings.size(), std::vector<float>(embeddings.size()));
  for (std::size_t i = 0; i < embeddings.size(); ++i) {
    for (std::size_t j = 0; j < embeddings.size(); ++j) {
      matrix[i][j] = static_cast<float>(stile::cosine_similarity(embeddings[i], embeddings[j]));
    }
  }
  if (options.format == Format::kJson) {
    fmt::print("{}\n", to_json({{"texts", options.sentences}, {"similarity", matrix}}));
    return;
  }
  for (const std::vector<float>& row : matrix) fmt::print("{:7.4f}\n", fmt::join(row, " "));
}

int finish_output() {
  std::fflush(stdout);
  if (std::ferror(stdout)) throw stile::Error("cannot write the output");
  return 0;
}

int run(const Options& options) {
  using Clock = std::chrono::steady_clock;
  const auto ms_since = [](Clock::time_point start) {
    return std::chrono::duration<double, std::milli>(Clock::now() - start).count();
  };

  const auto load_start = Clock::now();
  stile::ModelPrecision precision = stile::precision_preset(options.precision);
  std::string precision_name = options.precision;
  // A mapping over several processors: the mapped forward (hetero/) computes the hidden states;
  // the encoder below (fp32) gives the tokenizer and the pooling.
  std::unique_ptr<stile::MappedForward> mapped;
  stile::ProcessorSet processors;
  if (!options.mapping.empty()) {
    const stile::OpMappingFile file = stile::OpMappingFile::load(options.mapping);
    const std::filesystem::path bert_dir = stile::read_sentence_layout(options.model_dir).encoder_dir;
    const stile::EncoderConfig config = stile::read_encoder_config((bert_dir / "config.json").string());
    precision_name = "mapping " + options.mapping.string();
    if (file.single_processor() != static_cast<std::size_t>(-1)) {
      precision = stile::model_precision_of(file, config, options.mapping.string());
    } else {
      stile::check_mapping_shape(file, config, options.mapping.string());
      const stile::OpGraph g = stile::op_graph_of(config);
      processors = stile::open_mapping_processors(file.processors, g, file.mapping, options.mapping.string());
      mapped = std::make_unique<stile::MappedForward>(
          stile::BertWeights::load(bert_dir, stile::mapped_weights_precision(g, file.mapping.format)), file.mapping,
          processors.pointers());
      precision_name += fmt::format(" on {}", fmt::join(file.processors, ", "));
    }
  }
  const stile::SentenceEncoder encoder = stile::SentenceEncoder::load(options.model_dir, precision);
  if (options.verbose) {
    fmt::print(stderr, "embed: loaded {} in {:.1f} ms (dim {}, max {} tokens, precision {})\n",
               options.model_dir.string(), ms_since(load_start), encoder.dim(), encoder.config().max_seq_length,
               precision_name);
  }
  if (options.tokens) {
    std::vector<stile::Encoding> encodings;
    for (const std::string& sentence : options.sentences) encodings.push_back(encoder.encode(sentence, options.prompt_name));
    print_tokens(options, encoder.tokenizer(), encodings);
    return finish_output();
  }
  std::unique_ptr<stile::ThreadPool> pool;
  if (options.threads != 0) pool = std::make_unique<stile::ThreadPool>(options.threads);

  std::vector<std::vector<float>> embeddings;
  embeddings.reserve(options.sentences.size());
  const std::size_t prompt_tokens = encoder.prompt_tokens(options.prompt_name);
  std::size_t tokens = 0;
  double tokenize_ms = 0.0;
  double encode_ms = 0.0;
  if (options.stride) {
    const auto encode_start = Clock::now();
    for (const std::string& sentence : options.sentences) {
      embeddings.push_back(encoder.embed_long(sentence, *options.stride, pool.get(), options.prompt_name));
    }
    encode_ms += ms_since(encode_start);
  }
  for (std::size_t first = 0; !options.stride && first < options.sentences.size(); first += kChunkSentences) {
    const std::size_t count = std::min(kChunkSentences, options.sentences.size() - first);
    const auto tokenize_start = Clock::now();
    std::vector<stile::Encoding> batch;
    for (std::size_t i = first; i < first + count; ++i) {
      batch.push_back(encoder.encode(options.sentences[i], options.prompt_name));
      tokens += batch.back().size();
    }
    tokenize_ms += ms_since(tokenize_start);
    const auto encode_start = Clock::now();
    if (mapped) {
      std::vector<float> hidden;
      const std::vector<std::size_t> lengths = mapped->encode(batch, hidden);
      for (std::vector<float>& e : encoder.embed_hidden(hidden, lengths, prompt_tokens)) embeddings.push_back(std::move(e));
    } else {
      for (std::vector<float>& e : encoder.embed_encoded(batch, pool.get(), prompt_tokens)) {
        embeddings.push_back(std::move(e));
      }
    }
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
  return finish_output();
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(parse_args(argc, argv));
  } catch (const std::exception& e) {
    fmt::print(stderr, "embed: {}\n", e.what());
    return 1;
  }
}
