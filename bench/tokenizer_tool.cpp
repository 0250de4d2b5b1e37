// tokenizer_tool: stile's side of the tokenizer.json comparison with Hugging Face's tokenizers.
// Not a test: scripts/tokenizer-parity and bench/run_tokenizer_bench drive it.
//
//   tokenizer_tool dump --tokenizer FILE < cases.jsonl > out.jsonl
//     Each input line is a case of scripts/make_tokenizer_json_goldens.py's format ({"text": hex,
//     "pair": hex or null, "add_special_tokens", "truncation": null or {"max_length", "stride",
//     "strategy"}}; other fields are ignored); each output line is the case's inputs and stile's
//     answer: "ids", "type_ids", "offsets" (bytes), "special_tokens_mask", "overflowing" (the same
//     fields, recursively), or "error" with stile::Error's message. One line out per line in.
//
//   tokenizer_tool time --tokenizer FILE --texts FILE [--seconds S] [--pairs]
//     Single-thread encode throughput over the texts (one a line; with --pairs, lines 2i and
//     2i+1 are a pair), passes over all of them until S seconds have gone, after one warm-up pass.
//     Prints one JSON object: texts, tokens, seconds, texts_per_s, tokens_per_s, us_per_text.
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "stile/core/error.hpp"
#include "stile/text/tokenizer.hpp"

namespace {

using nlohmann::json;

std::string from_hex(std::string_view hex) {
  if (hex.size() % 2 != 0) throw std::runtime_error("a hex string of odd length");
  auto nibble = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    throw std::runtime_error("a hex string with a character that is not a hex digit");
  };
  std::string out(hex.size() / 2, '\0');
  for (std::size_t i = 0; i < out.size(); ++i) {
    out[i] = static_cast<char>(nibble(hex[2 * i]) * 16 + nibble(hex[2 * i + 1]));
  }
  return out;
}

stile::TruncationStrategy strategy_of(const std::string& name) {
  if (name == "longest_first") return stile::TruncationStrategy::longest_first;
  if (name == "only_first") return stile::TruncationStrategy::only_first;
  if (name == "only_second") return stile::TruncationStrategy::only_second;
  throw std::runtime_error("unknown truncation strategy \"" + name + "\"");
}

json encoding_json(const stile::Encoding& e) {
  json offsets = json::array();
  for (const stile::TokenOffsets& o : e.offsets) offsets.push_back({o.begin, o.end});
  json special = json::array();
  for (const std::uint8_t m : e.special_tokens_mask) special.push_back(static_cast<int>(m));
  json overflowing = json::array();
  for (const stile::Encoding& window : e.overflowing) overflowing.push_back(encoding_json(window));
  json out = json::object();
  out["ids"] = e.input_ids;
  out["type_ids"] = e.token_type_ids;
  out["offsets"] = std::move(offsets);
  out["special_tokens_mask"] = std::move(special);
  out["overflowing"] = std::move(overflowing);
  return out;
}

int dump(stile::Tokenizer& tokenizer) {
  std::ios::sync_with_stdio(false);
  std::string line;
  std::optional<json> current_truncation;  // what set_truncation last got
  bool first_case = true;
  while (std::getline(std::cin, line)) {
    json out = json::object();
    try {
      const json c = json::parse(line);
      out["text"] = c.at("text");
      out["pair"] = c.contains("pair") ? c.at("pair") : json(nullptr);
      const bool add_special_tokens = c.value("add_special_tokens", true);
      out["add_special_tokens"] = add_special_tokens;
      const json truncation = c.contains("truncation") ? c.at("truncation") : json(nullptr);
      out["truncation"] = truncation;
      const std::string text = from_hex(c.at("text").get<std::string>());
      const std::optional<std::string> pair =
          out["pair"].is_null() ? std::nullopt : std::optional<std::string>(from_hex(out["pair"].get<std::string>()));
      try {
        if (first_case || !current_truncation || *current_truncation != truncation) {
          // The file's own truncation (all-MiniLM-L6-v2's has max_length 128) never applies: each
          // case says its own.
          tokenizer.set_truncation(std::nullopt);
          current_truncation = json(nullptr);
          first_case = false;
          if (!truncation.is_null()) {
            tokenizer.set_truncation(stile::Truncation{truncation.at("max_length").get<std::size_t>(),
                                                       truncation.at("stride").get<std::size_t>(),
                                                       strategy_of(truncation.at("strategy").get<std::string>())});
            current_truncation = truncation;
          }
        }
        const stile::TokenizeOptions options{.add_special_tokens = add_special_tokens};
        const stile::Encoding e =
            pair ? tokenizer.encode_pair(text, *pair, options) : tokenizer.encode(text, options);
        out.update(encoding_json(e));
      } catch (const stile::Error& error) {
        out["error"] = error.what();
      }
    } catch (const std::exception& error) {
      // Not stile's answer: the case itself could not be read (or the tokenizer threw something
      // other than stile::Error, which the comparison must see as a difference).
      out["error"] = std::string("tokenizer_tool: ") + error.what();
      out["tool_error"] = true;
    }
    std::cout << out.dump(-1, ' ', true, json::error_handler_t::replace) << '\n';
  }
  std::cout.flush();
  return 0;
}

std::vector<std::string> read_lines(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error("cannot open " + path.string());
  std::vector<std::string> lines;
  std::string line;
  while (std::getline(in, line)) lines.push_back(line);
  return lines;
}

int time_encode(const stile::Tokenizer& tokenizer, const std::filesystem::path& texts_path, double seconds,
                bool pairs) {
  const std::vector<std::string> texts = read_lines(texts_path);
  if (texts.empty() || (pairs && texts.size() < 2)) throw std::runtime_error("no texts in " + texts_path.string());
  const std::size_t per_pass = pairs ? texts.size() / 2 : texts.size();
  auto pass = [&] {
    std::size_t tokens = 0;
    if (pairs) {
      for (std::size_t i = 0; i + 1 < texts.size(); i += 2) tokens += tokenizer.encode_pair(texts[i], texts[i + 1]).size();
    } else {
      for (const std::string& t : texts) tokens += tokenizer.encode(t).size();
    }
    return tokens;
  };
  pass();  // warm-up
  using clock = std::chrono::steady_clock;
  const auto start = clock::now();
  std::size_t done = 0;
  std::size_t tokens = 0;
  double elapsed = 0;
  do {
    tokens += pass();
    done += per_pass;
    elapsed = std::chrono::duration<double>(clock::now() - start).count();
  } while (elapsed < seconds);
  json out = {{"texts", done},
              {"tokens", tokens},
              {"seconds", elapsed},
              {"texts_per_s", static_cast<double>(done) / elapsed},
              {"tokens_per_s", static_cast<double>(tokens) / elapsed},
              {"us_per_text", 1e6 * elapsed / static_cast<double>(done)}};
  std::cout << out.dump() << '\n';
  return 0;
}

}  // namespace

int usage(const char* problem) {
  std::fprintf(stderr,
               "tokenizer_tool: %s\n"
               "usage: tokenizer_tool dump --tokenizer FILE < cases.jsonl > answers.jsonl\n"
               "       tokenizer_tool time --tokenizer FILE --texts FILE [--seconds S] [--pairs]\n",
               problem);
  return 2;
}

int main(int argc, char** argv) {
  // Its own small command line (not tools/cli.hpp): the tool needs the headers alone, no kernels.
  std::filesystem::path tokenizer_path;
  std::filesystem::path texts_path;
  double seconds = 2.0;
  bool pairs = false;
  std::string mode;
  for (int i = 1; i < argc; ++i) {
    const std::string_view arg = argv[i];
    const bool has_value = i + 1 < argc;
    if (arg == "--tokenizer" && has_value) {
      tokenizer_path = argv[++i];
    } else if (arg == "--texts" && has_value) {
      texts_path = argv[++i];
    } else if (arg == "--seconds" && has_value) {
      try {
        seconds = std::stod(argv[++i]);
      } catch (const std::exception&) {
        return usage("--seconds takes a number");
      }
    } else if (arg == "--pairs") {
      pairs = true;
    } else if (arg == "-h" || arg == "--help") {
      usage("stile's tokenizer.json pipeline: answers for cases, or single-thread encode throughput");
      return 0;
    } else if (mode.empty() && (arg == "dump" || arg == "time")) {
      mode = arg;
    } else {
      return usage(("unknown argument " + std::string(arg)).c_str());
    }
  }
  if (mode.empty()) return usage("give dump or time");
  if (tokenizer_path.empty()) return usage("give --tokenizer FILE");
  if (mode == "time" && texts_path.empty()) return usage("time needs --texts FILE");
  try {
    stile::Tokenizer tokenizer = stile::Tokenizer::from_file(tokenizer_path);
    if (mode == "dump") return dump(tokenizer);
    tokenizer.set_truncation(std::nullopt);
    return time_encode(tokenizer, texts_path, seconds, pairs);
  } catch (const std::exception& error) {
    std::fprintf(stderr, "tokenizer_tool: %s\n", error.what());
    return 1;
  }
}
