// predict: a fine-tuned checkpoint's own task, from its head: classify texts (or pairs), rerank
// passages for a query (a cross-encoder), tag entities (a token classifier), or make SPLADE sparse
// vectors. One program with a subcommand per task: they share the model loading, the inputs
// (arguments, else standard input one per line), the threads, the number formats and the output
// formats, and the model directory decides which task it can answer.
//
//   predict classify --model DIR "A gripping film." "Dull."
//   predict rerank --model DIR "what is stile?" < passages.txt
//   predict ner --model DIR --aggregation simple --stride 16 < documents.txt
//   predict sparse --model DIR --top 20 "a query"
//
// Exit status: 0 ok, 1 runtime error (bad model, a task the model has no head for), 2 usage error.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <filesystem>
#include <iostream>
#include <memory>
#include <numeric>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "cli.hpp"
#include "stile/core/thread_pool.hpp"
#include "stile/model/task_model.hpp"

namespace {

using Json = nlohmann::ordered_json;

enum class Task { kClassify, kRerank, kNer, kSparse };

struct Options {
  Task task = Task::kClassify;
  std::filesystem::path model_dir;
  bool json = false;
  bool all_labels = false;
  bool pairs = false;
  std::string query;
  stile::Aggregation aggregation = stile::Aggregation::kSimple;
  std::optional<std::size_t> stride;
  std::size_t top = 0;  // sparse: terms shown (0: 10 in text, all in json)
  std::size_t threads = 0;
  std::string precision = "fp32";
  std::vector<std::string> inputs;
};

constexpr const char* kUsage =
    "usage: predict classify|rerank|ner|sparse --model DIR [options] [input ...]\n"
    "\n"
    "A fine-tuned checkpoint's own task, computed with its head:\n"
    "  classify  each text's labels and scores (a <Family>ForSequenceClassification; --pairs for text pairs)\n"
    "  rerank    QUERY, then passages: each passage's cross-encoder score, best first\n"
    "  ner       each text's entities (a <Family>ForTokenClassification)\n"
    "  sparse    each text's SPLADE vector (a masked LM with sentence-transformers' SpladePooling)\n"
    "Inputs come from the arguments; with none, from standard input, one per line.\n"
    "See predict SUBCOMMAND --help.\n";

std::string to_json(const Json& value) { return value.dump(-1, ' ', false, Json::error_handler_t::replace); }

// Python's str index (code points) of a byte offset: what transformers' pipelines report.
std::size_t char_index(std::string_view text, std::size_t byte) {
  std::size_t n = 0;
  for (std::size_t i = 0; i < byte && i < text.size(); ++i) n += (static_cast<unsigned char>(text[i]) & 0xC0) != 0x80;
  return n;
}

Options parse_args(int argc, char** argv) {
  Options o;
  const std::string_view sub = argc >= 2 ? argv[1] : "";
  if (sub == "--help" || sub == "-h") {
    std::fputs(kUsage, stdout);
    std::exit(0);
  }
  constexpr std::pair<std::string_view, Task> kSubcommands[] = {
      {"classify", Task::kClassify}, {"rerank", Task::kRerank}, {"ner", Task::kNer}, {"sparse", Task::kSparse}};
  const auto found =
      std::find_if(std::begin(kSubcommands), std::end(kSubcommands), [&](const auto& s) { return s.first == sub; });
  if (found == std::end(kSubcommands)) {
    fmt::print(stderr, "predict: {}\n{}", sub.empty() ? "no subcommand" : fmt::format("unknown subcommand '{}'", sub),
               kUsage);
    std::exit(2);
  }
  o.task = found->second;
  const std::string program = fmt::format("predict {}", sub);
  const char* synopsis =
      o.task == Task::kRerank ? "--model DIR [options] QUERY [passage ...]" : "--model DIR [options] [text ...]";
  const char* about = "";
  switch (o.task) {
    case Task::kClassify:
      about =
          "Classifies each text with the model's sequence-classification head: the scores are the text-"
          "classification pipeline's (softmax for single-label models, sigmoid for multi-label ones and one-"
          "label ones, the logits for regression). A text longer than the model's positions is truncated.";
      break;
    case Task::kRerank:
      about =
          "Scores each passage against QUERY with a cross-encoder (one output: the pair's logit through the "
          "model's activation: sigmoid unless its sentence-transformers config names another) and lists them best "
          "first. A pair "
          "longer than the model's positions loses tokens from the longer text first.";
      break;
    case Task::kNer:
      about =
          "Tags each text's entities with the model's token-classification head, words and groups made as "
          "transformers' token-classification pipeline makes them. A text longer than the model's positions is "
          "truncated, or with --stride covered in overlapping windows.";
      break;
    case Task::kSparse:
      about =
          "Makes each text's SPLADE vector: per vocabulary term, log(1 + ReLU) of the masked-LM logits, "
          "pooled over the tokens. A text longer than the model's positions is truncated.";
      break;
  }
  stile_cli::Parser cli(program, synopsis, about);
  cli.flag("--model", "DIR", "the model directory (config.json, model.safetensors, tokenizer.json)", o.model_dir);
  std::string format = "text";
  cli.flag("--format", "FMT", "text or json (json: every value, lossless)", format).one_of({"text", "json"});
  cli.threads(o.threads, "threads to compute with (default: $STILE_NUM_THREADS, else one per core)");
  cli.precision(o.precision);
  if (o.task == Task::kClassify) {
    cli.toggle("--all", "text format: every label's score, not only the best", o.all_labels);
    cli.toggle("--pairs", "each input is a pair: TEXT<tab>TEXT_PAIR", o.pairs);
    cli.example("predict classify --model sst2-bert \"A gripping film.\" \"Dull.\"");
  }
  std::string aggregation = "simple";
  std::size_t stride = 0;
  bool has_stride = false;
  if (o.task == Task::kNer) {
    cli.flag("--aggregation", "NAME",
             "none (every token), simple (adjacent tokens of one type grouped), first, max or average (whole words "
             "labelled by their first token, their best token or their tokens' mean, then grouped)",
             aggregation)
        .one_of({"none", "simple", "first", "max", "average"});
    cli.flag("--stride", "N",
             "cover a long text in windows of the model's length that repeat the last N tokens of the window before",
             [&](std::string_view v) {
               stride = stile_cli::parse_whole(v, "--stride");
               has_stride = true;
             });
    cli.example("predict ner --model ner-bert --stride 32 < documents.txt");
  }
  if (o.task == Task::kSparse) {
    cli.flag("--top", "K", "the K highest-weighted terms (default: 10 in text, all in json)", o.top).range(1, 1 << 30);
    cli.example("predict sparse --model splade --top 20 \"a query\"");
  }
  if (o.task == Task::kRerank) cli.example("predict rerank --model reranker \"what is stile?\" < passages.txt");
  std::vector<std::string> args = cli.parse(argc - 1, argv + 1);
  if (o.model_dir.empty()) cli.fail("--model DIR is required (a checkpoint with a task head)");
  o.json = format == "json";
  o.aggregation = stile::aggregation_from_string(aggregation);
  if (has_stride) o.stride = stride;
  if (o.task == Task::kRerank) {
    if (args.empty()) cli.fail("rerank needs a QUERY");
    o.query = args.front();
    args.erase(args.begin());
  }
  o.inputs = std::move(args);
  if (o.inputs.empty()) {
    for (std::string line; std::getline(std::cin, line);) {
      if (line.ends_with('\r')) line.pop_back();
      o.inputs.push_back(std::move(line));
    }
    if (std::cin.bad()) throw stile::Error("cannot read standard input");
  }
  return o;
}

void print_json_array(const std::vector<Json>& rows) {
  fmt::print("[");
  for (std::size_t i = 0; i < rows.size(); ++i) fmt::print("{}\n{}", i == 0 ? "" : ",", to_json(rows[i]));
  fmt::print("{}]\n", rows.empty() ? "" : "\n");
}

void classify(const Options& o, const stile::TaskModel& m, stile::ThreadPool* pool) {
  std::vector<Json> rows;
  for (const std::string& input : o.inputs) {
    std::string_view text = input;
    std::optional<std::string_view> pair;
    if (o.pairs) {
      const std::size_t tab = input.find('\t');
      if (tab == std::string::npos) throw stile::Error(fmt::format("--pairs: no tab in the input \"{}\"", input));
      text = std::string_view(input).substr(0, tab);
      pair = std::string_view(input).substr(tab + 1);
    }
    const stile::TextClassification c = m.classify(text, pair, pool);
    std::vector<std::size_t> order(c.scores.size());
    std::iota(order.begin(), order.end(), std::size_t{0});
    std::stable_sort(order.begin(), order.end(),
                     [&](std::size_t a, std::size_t b) { return c.scores[a] > c.scores[b]; });
    if (o.json) {
      Json scores = Json::array();
      for (const std::size_t k : order) scores.push_back({{"label", m.labels()[k]}, {"score", c.scores[k]}});
      Json row = {{"text", text}};
      if (pair) row["text_pair"] = *pair;
      row["label"] = m.labels()[c.top()];
      row["scores"] = std::move(scores);
      row["logits"] = c.logits;
      rows.push_back(std::move(row));
      continue;
    }
    if (o.all_labels) {
      for (const std::size_t k : order) fmt::print("{}\t{:.6f}\t", m.labels()[k], c.scores[k]);
      fmt::print("{}\n", input);
    } else {
      fmt::print("{}\t{:.6f}\t{}\n", m.labels()[c.top()], c.scores[c.top()], input);
    }
  }
  if (o.json) print_json_array(rows);
}

void rerank(const Options& o, const stile::TaskModel& m, stile::ThreadPool* pool) {
  const std::vector<double> scores = m.score_pairs(o.query, o.inputs, pool);
  const std::vector<std::size_t> order = stile::TaskModel::rank(scores);
  if (!o.json) {
    for (const std::size_t i : order) fmt::print("{:.6f}\t{}\t{}\n", scores[i], i, o.inputs[i]);
    return;
  }
  Json ranked = Json::array();
  for (const std::size_t i : order) ranked.push_back({{"index", i}, {"score", scores[i]}, {"text", o.inputs[i]}});
  fmt::print("{}\n", to_json({{"query", o.query}, {"results", std::move(ranked)}}));
}

void ner(const Options& o, const stile::TaskModel& m, stile::ThreadPool* pool) {
  std::vector<Json> rows;
  const bool tokens = o.aggregation == stile::Aggregation::kNone;
  for (std::size_t t = 0; t < o.inputs.size(); ++t) {
    const std::string& text = o.inputs[t];
    const std::vector<stile::Entity> entities = m.entities(text, o.aggregation, o.stride, pool);
    Json list = Json::array();
    for (const stile::Entity& e : entities) {
      const std::string word = text.substr(e.begin, e.end - e.begin);
      if (!o.json) {
        fmt::print("{}\t{}\t{:.6f}\t{}\t{}\t{}\n", t, e.label, e.score, e.begin, e.end, word);
        continue;
      }
      Json entity = {{tokens ? "entity" : "entity_group", e.label},
                     {"score", e.score},
                     {"word", word},
                     {"start", char_index(text, e.begin)},
                     {"end", char_index(text, e.end)},
                     {"byte_start", e.begin},
                     {"byte_end", e.end}};
      if (tokens) entity["index"] = e.index;
      list.push_back(std::move(entity));
    }
    if (o.json) rows.push_back({{"text", text}, {"entities", std::move(list)}});
  }
  if (o.json) print_json_array(rows);
}

void sparse(const Options& o, const stile::TaskModel& m, stile::ThreadPool* pool) {
  std::vector<Json> rows;
  for (const std::string& text : o.inputs) {
    const stile::SparseVector v = m.sparse(text, pool);
    std::vector<std::size_t> order(v.ids.size());
    std::iota(order.begin(), order.end(), std::size_t{0});
    std::stable_sort(order.begin(), order.end(),
                     [&](std::size_t a, std::size_t b) { return v.weights[a] > v.weights[b]; });
    const std::size_t shown = std::min(order.size(), o.top != 0 ? o.top : (o.json ? order.size() : 10));
    order.resize(shown);
    const auto term = [&](std::size_t i) { return std::string(m.tokenizer().id_to_token(v.ids[i]).value_or("")); };
    if (!o.json) {
      fmt::print("{} ({} terms)\n", text, v.ids.size());
      for (const std::size_t i : order) fmt::print("  {}\t{:.6f}\t{}\n", v.ids[i], v.weights[i], term(i));
      continue;
    }
    Json ids = Json::array(), weights = Json::array(), terms = Json::array();
    for (const std::size_t i : order) {
      ids.push_back(v.ids[i]);
      weights.push_back(v.weights[i]);
      terms.push_back(term(i));
    }
    rows.push_back(
        {{"text", text}, {"ids", std::move(ids)}, {"weights", std::move(weights)}, {"terms", std::move(terms)}});
  }
  if (o.json) print_json_array(rows);
}

int run(const Options& o) {
  const stile::TaskModel model = stile::TaskModel::load(o.model_dir, stile::precision_preset(o.precision));
  std::unique_ptr<stile::ThreadPool> pool;
  if (o.threads != 0) pool = std::make_unique<stile::ThreadPool>(o.threads);
  switch (o.task) {
    case Task::kClassify: classify(o, model, pool.get()); break;
    case Task::kRerank: rerank(o, model, pool.get()); break;
    case Task::kNer: ner(o, model, pool.get()); break;
    case Task::kSparse: sparse(o, model, pool.get()); break;
  }
  std::fflush(stdout);
  if (std::ferror(stdout)) throw stile::Error("cannot write the output");
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(parse_args(argc, argv));
  } catch (const std::exception& e) {
    fmt::print(stderr, "predict: {}\n", e.what());
    return 1;
  }
}
