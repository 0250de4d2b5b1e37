#pragma once
// The command line of stile's programs (tools/, bench/, examples/; not part of the library): each
// flag declared once, with its value placeholder, its help and a typed destination whose value
// before parse() is the default; --help generated from the declarations; positional arguments and
// "--"; the same checks for the same kinds of value everywhere; and usage errors that name the
// flag and exit with status 2.
//
//   stile_cli::Parser cli("profile", "[options] STORE", "Measures ...");
//   std::size_t repeats = 5;
//   cli.flag("--repeats", "R", "timed runs per measurement", repeats).at_least(1);
//   cli.threads(threads);
//   const std::vector<std::string> args = cli.parse(argc, argv);  // --help: prints, exits 0
//   if (args.size() != 1) cli.fail("give one shard store");       // prints, exits 2
//
// A default that is a sentinel (the largest number, infinity) shows as "none" unless the flag
// says it in words (.shown_default("no rank")); cli.example(...) adds a line to the help's examples.
#include <algorithm>
#include <charconv>
#include <concepts>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <exception>
#include <filesystem>
#include <functional>
#include <limits>
#include <optional>
#include <string>
#include <string_view>
#include <system_error>
#include <type_traits>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "stile/core/error.hpp"
#include "stile/io/read_backend.hpp"
#include "stile/io/storage_emulator.hpp"
#include "stile/kernels/active_target.hpp"
#include "stile/kernels/int8_gemm.hpp"
#include "stile/ops/precision.hpp"
#include "stile/quant/packed_layout.hpp"

namespace stile_cli {

// Thrown by the value parsers (and by a flag's own parse function); parse() reports it.
struct UsageError {
  std::string message;
};

// A whole number: digits only (no sign, space or exponent), within std::size_t.
inline std::size_t parse_whole(std::string_view text, std::string_view what) {
  std::size_t value = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (text.empty() || ec != std::errc() || end != text.data() + text.size()) {
    throw UsageError{fmt::format("{} wants a whole number, got '{}'", what, text)};
  }
  return value;
}

// A finite decimal number, the whole text.
inline double parse_number(std::string_view text, std::string_view what) {
  double value = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (text.empty() || ec != std::errc() || end != text.data() + text.size() || !std::isfinite(value)) {
    throw UsageError{fmt::format("{} wants a number, got '{}'", what, text)};
  }
  return value;
}

// One of the bitwidths a store can hold (2..6 or 32).
inline unsigned parse_bitwidth(std::string_view text, std::string_view what) {
  const std::size_t bits = parse_whole(text, what);
  if (bits > 32 || !stile::quant::is_supported_bits(static_cast<unsigned>(bits))) {
    throw UsageError{fmt::format("{}: {} is not a supported bitwidth (2, 3, 4, 5, 6 or 32)", what, text)};
  }
  return static_cast<unsigned>(bits);
}

// A comma-separated list, each item parsed by `item`; no item may be empty.
template <class Item>
auto parse_list(std::string_view text, std::string_view what, Item item) {
  std::vector<decltype(item(text))> out;
  for (std::size_t begin = 0;;) {
    const std::size_t comma = text.find(',', begin);
    const std::string_view part = text.substr(begin, comma == std::string_view::npos ? text.npos : comma - begin);
    if (part.empty()) throw UsageError{fmt::format("{} wants a comma-separated list, got '{}'", what, text)};
    out.push_back(item(part));
    if (comma == std::string_view::npos) return out;
    begin = comma + 1;
  }
}

// The types of number a flag can hold.
template <class T>
concept Number = (std::is_unsigned_v<T> && !std::is_same_v<T, bool>) || std::is_floating_point_v<T>;

// One declared flag. The modifiers return it, to chain after the declaration.
struct Flag {
  std::string name, alias, placeholder, help;  // no placeholder: a switch, it takes no value
  std::string default_text;                    // shown in the help as "(default: ...)" unless it says one
  double min = -std::numeric_limits<double>::infinity();
  double max = std::numeric_limits<double>::infinity();
  std::vector<std::string> choices;  // when not empty: the value must be one of them
  std::function<void(const Flag&, std::string_view)> set;

  Flag& range(double lowest, double highest) {
    min = lowest;
    max = highest;
    return *this;
  }
  Flag& at_least(double lowest) { return range(lowest, max); }
  Flag& one_of(std::vector<std::string> names) {
    choices = std::move(names);
    return *this;
  }
  // The default as the help shows it, in words, where the value itself would mean nothing to a
  // reader (a sentinel such as the largest number).
  Flag& shown_default(std::string words) {
    default_text = std::move(words);
    return *this;
  }
  Flag& short_name(std::string name_) {
    alias = std::move(name_);
    return *this;
  }

  // A number of this flag (or of one item of its list), within min..max.
  template <Number T>
  T number(std::string_view text) const {
    T value{};
    bool fits = true;
    if constexpr (std::is_integral_v<T>) {
      const std::size_t whole = parse_whole(text, name);
      if constexpr (sizeof(T) < sizeof(std::size_t)) fits = whole <= std::numeric_limits<T>::max();
      value = static_cast<T>(whole);
    } else {
      value = static_cast<T>(parse_number(text, name));
    }
    const double v = static_cast<double>(value);
    const double lo = std::max(min, static_cast<double>(std::numeric_limits<T>::lowest()));
    const double hi = std::min(max, static_cast<double>(std::numeric_limits<T>::max()));
    if (!fits || v < lo || v > hi) {
      const bool bounded = max < std::numeric_limits<double>::infinity() || sizeof(T) < sizeof(std::size_t);
      throw UsageError{bounded ? fmt::format("{} wants a number from {} to {}, got '{}'", name, lo, hi, text)
                               : fmt::format("{} wants a number of at least {}, got '{}'", name, lo, text)};
    }
    return value;
  }
};

class Parser {
 public:
  // usage: PROGRAM SYNOPSIS, then ABOUT (its lines wrapped), then the flags.
  Parser(std::string program, std::string synopsis, std::string about = {})
      : program_(std::move(program)), synopsis_(std::move(synopsis)), about_(std::move(about)) {}

  // Flags with a value, parsed by the destination's type.
  Flag& flag(std::string name, std::string placeholder, std::string help, std::string& to) {
    return add(std::move(name), std::move(placeholder), std::move(help), to,
               [&to](const Flag&, std::string_view v) { to = std::string(v); });
  }
  Flag& flag(std::string name, std::string placeholder, std::string help, std::filesystem::path& to) {
    return add(std::move(name), std::move(placeholder), std::move(help), to.string(),
               [&to](const Flag&, std::string_view v) { to = std::filesystem::path(std::string(v)); });
  }
  Flag& flag(std::string name, std::string placeholder, std::string help, std::optional<std::filesystem::path>& to) {
    return add(std::move(name), std::move(placeholder), std::move(help), to ? to->string() : "",
               [&to](const Flag&, std::string_view v) { to = std::filesystem::path(std::string(v)); });
  }
  // A number (unsigned: digits only; floating point: any finite decimal) within the flag's range,
  // or a comma list of them, each checked alike.
  template <Number T>
  Flag& flag(std::string name, std::string placeholder, std::string help, T& to) {
    const bool sentinel = to == std::numeric_limits<T>::max() || (std::is_floating_point_v<T> && std::isinf(to));
    return add(std::move(name), std::move(placeholder), std::move(help), sentinel ? "none" : fmt::format("{}", to),
               [&to](const Flag& f, std::string_view v) { to = f.number<T>(v); });
  }
  template <Number T>
  Flag& flag(std::string name, std::string placeholder, std::string help, std::vector<T>& to) {
    return add(std::move(name), std::move(placeholder), std::move(help), fmt::format("{}", fmt::join(to, ",")),
               [&to](const Flag& f, std::string_view v) {
                 to = parse_list(v, f.name, [&](std::string_view item) { return f.number<T>(item); });
               });
  }
  // A value parsed by the program (throw UsageError to refuse it).
  Flag& flag(std::string name, std::string placeholder, std::string help, std::function<void(std::string_view)> to) {
    return add(std::move(name), std::move(placeholder), std::move(help), "",
               [to = std::move(to)](const Flag&, std::string_view v) { to(v); });
  }
  // A bitwidth, or a comma list of them: each one a store can hold (2..6 or 32).
  Flag& bits(std::string name, std::string placeholder, std::string help, unsigned& to) {
    return add(std::move(name), std::move(placeholder), std::move(help), fmt::format("{}", to),
               [&to](const Flag& f, std::string_view v) { to = parse_bitwidth(v, f.name); });
  }
  Flag& bits(std::string name, std::string placeholder, std::string help, std::vector<unsigned>& to) {
    return add(std::move(name), std::move(placeholder), std::move(help), fmt::format("{}", fmt::join(to, ",")),
               [&to](const Flag& f, std::string_view v) {
                 to = parse_list(v, f.name, [&](std::string_view b) { return parse_bitwidth(b, f.name); });
               });
  }
  // Switches: no value.
  Flag& toggle(std::string name, std::string help, bool& to) {
    return toggle(std::move(name), std::move(help), [&to] { to = true; });
  }
  Flag& toggle(std::string name, std::string help, std::function<void()> to) {
    return add(std::move(name), "", std::move(help), "", [to = std::move(to)](const Flag&, std::string_view) { to(); });
  }

  // The flags several programs share.
  Flag& storage(std::string& name) {  // a storage emulator profile (io/storage_emulator.hpp)
    return flag("--storage", "NAME", "emulate a board's flash (emmc, sd, nvme), or none for the real device", name)
        .one_of(stile::storage_profile_names());
  }
  Flag& backend(stile::ReadBackendOptions& options) {  // the read backend's kind (io/read_backend.hpp)
    Flag& f = flag("--backend", "NAME", "read backend: auto (io_uring with O_DIRECT where it works), io_uring, pread",
                   [&options](std::string_view v) { options.kind = stile::parse_read_backend_kind(v); });
    f.default_text = stile::to_string(options.kind);
    return f.one_of({"auto", "io_uring", "pread"});
  }
  Flag& precision(std::string& name) {  // a number-format preset (ops/precision.hpp)
    return flag("--precision", "NAME",
                "number formats: fp32, fp16 (fp16 weights), int8 (int8 GEMMs and LayerNorm, erf-approximated GELU: "
                "the Arm Compute Library BERT recipe), ibert (I-BERT's integer-only GELU, softmax and LayerNorm)",
                name)
        .one_of({stile::kPrecisionPresets.begin(), stile::kPrecisionPresets.end()});
  }
  // A Highway SIMD target the CPU has (e.g. AVX2, SSE4), forced for the whole run: to measure a
  // narrower machine's code paths on this one. (Applied when parsed: before any kernel runs.)
  Flag& simd_target() {
    return flag("--target", "NAME", "run the SIMD kernels for this Highway target (e.g. AVX2, SSE4; default: the best)",
                [](std::string_view v) {
                  try {
                    stile::set_simd_target(v);
                  } catch (const stile::Error& e) {
                    throw UsageError{fmt::format("--target: {}", e.what())};
                  }
                });
  }
  // Forbids the int8 dot-product instructions (VNNI, AVX-VNNI, sdot) for the whole run: what a CPU
  // without them runs (on x86, 7-bit weights and activations: kernels/int8_gemm-inl.h). Applied
  // when parsed: before any weights are quantized.
  Flag& no_int8_dot() {
    return toggle("--no-dot", "int8 GEMMs without VNNI / AVX-VNNI / sdot (what a CPU without them runs)",
                  [] { stile::detail::int8_dot_disabled() = true; });
  }
  // 0 is the default: one per core (ThreadPool's meaning of 0), as the tools have always taken it.
  Flag& threads(std::size_t& n, std::string help = "compute threads (0: one per core)") {
    Flag& f = flag("--threads", "N", std::move(help), n).range(0, 1024);
    if (n == 0) f.default_text = "one per core";
    return f;
  }

  // The positional arguments, in order. --help prints the help and exits 0; a usage error prints
  // it and exits 2.
  std::vector<std::string> parse(int argc, const char* const* argv) {
    std::vector<std::string> positional;
    bool literal = false;
    try {
      for (int i = 1; i < argc; ++i) {
        const std::string_view arg = argv[i];
        if (literal || arg.size() < 2 || arg[0] != '-') {
          positional.emplace_back(arg);
        } else if (arg == "--") {
          literal = true;
          literal_from_ = positional.size();
        } else if (arg == "--help" || arg == "-h") {
          std::fputs(help().c_str(), stdout);
          std::exit(0);
        } else {
          const std::size_t eq = arg.starts_with("--") ? arg.find('=') : std::string_view::npos;
          const std::string_view name = arg.substr(0, eq);
          const Flag* f = find(name);
          if (f == nullptr) throw UsageError{fmt::format("unknown option '{}'", name)};
          if (f->placeholder.empty() && eq != std::string_view::npos) {
            throw UsageError{fmt::format("{} takes no value", name)};
          }
          std::string_view value;
          if (eq != std::string_view::npos) {
            value = arg.substr(eq + 1);
          } else if (!f->placeholder.empty()) {
            if (i + 1 >= argc) throw UsageError{fmt::format("{} needs a value ({})", name, f->placeholder)};
            value = argv[++i];
          }
          if (!f->choices.empty() && std::find(f->choices.begin(), f->choices.end(), value) == f->choices.end()) {
            throw UsageError{fmt::format("{} wants one of {}, got '{}'", name, fmt::join(f->choices, ", "), value)};
          }
          f->set(*f, value);
        }
      }
    } catch (const UsageError& e) {
      fail(e.message);
    } catch (const std::exception& e) {  // a library parser's refusal (stile::Error)
      fail(e.what());
    }
    if (!literal) literal_from_ = positional.size();
    return positional;
  }

  // A positional argument that must be a whole number in lowest..highest (a usage error otherwise).
  std::size_t whole(std::string_view text, std::string_view what, std::size_t lowest, std::size_t highest) const {
    std::size_t v = 0;
    try {
      v = parse_whole(text, what);
    } catch (const UsageError& e) {
      fail(e.message);
    }
    if (v < lowest || v > highest) {
      fail(fmt::format("{} wants a number from {} to {}, got '{}'", what, lowest, highest, text));
    }
    return v;
  }

  // A command line shown under "examples:" at the end of --help (an optional note after it).
  Parser& example(std::string command, std::string note = {}) {
    examples_.push_back(note.empty() ? std::move(command) : fmt::format("{}   # {}", command, note));
    return *this;
  }

  // Where the positional arguments after "--" start (all of them are positional, even "-").
  std::size_t literal_from() const noexcept { return literal_from_; }

  // A usage error: the message, the usage line, exit status 2.
  [[noreturn]] void fail(std::string_view message) const {
    std::fflush(stdout);
    fmt::print(stderr, "{}: {}\nusage: {} {}\n(see {} --help)\n", program_, message, program_, synopsis_, program_);
    std::exit(2);
  }

  std::string help() const {
    std::string out = fmt::format("usage: {} {}\n", program_, synopsis_);
    if (!about_.empty()) out += fmt::format("\n{}", wrap(about_, 0));
    out += "\noptions:\n";
    // "  --name PLACEHOLDER", then the help from column kHelpColumn (the next line if the name is long).
    const auto row = [&](std::string_view left, std::string_view text) {
      const std::size_t used = 2 + left.size();
      if (used + 2 > kHelpColumn) {
        out += fmt::format("  {}\n{:{}}", left, "", kHelpColumn);
      } else {
        out += fmt::format("  {}{:{}}", left, "", kHelpColumn - used);
      }
      out += wrap(text, kHelpColumn).substr(kHelpColumn);
    };
    for (const Flag& f : flags_) {
      const bool says_default = f.default_text.empty() || f.help.find("default") != std::string::npos;
      row(fmt::format("{}{}{}{}{}", f.alias, f.alias.empty() ? "" : ", ", f.name, f.placeholder.empty() ? "" : " ",
                      f.placeholder),
          says_default ? f.help : fmt::format("{} (default: {})", f.help, f.default_text));
    }
    row("-h, --help", "print this help");
    row("--", "the arguments after it are positional, even those starting with \"-\"");
    if (!examples_.empty()) {
      out += "\nexamples:\n";
      for (const std::string& e : examples_) out += fmt::format("  {}\n", e);
    }
    return out;
  }

 private:
  static constexpr std::size_t kHelpColumn = 24;
  static constexpr std::size_t kHelpWidth = 100;

  // Each line of text, words wrapped at kHelpWidth, every output line indented by `indent`.
  static std::string wrap(std::string_view text, std::size_t indent) {
    std::string out;
    for (std::size_t begin = 0; begin <= text.size();) {
      const std::size_t newline = std::min(text.find('\n', begin), text.size());
      std::string line(indent, ' ');
      for (std::size_t w = begin; w < newline;) {
        const std::size_t space = std::min(text.find(' ', w), newline);
        const std::string_view word = text.substr(w, space - w);
        if (line.size() > indent && line.size() + 1 + word.size() > kHelpWidth) {
          out += line + "\n";
          line.assign(indent, ' ');
        }
        if (line.size() > indent) line += ' ';
        line += word;
        w = space + 1;
      }
      out += line + "\n";
      begin = newline + 1;
    }
    return out;
  }

  Flag& add(std::string name, std::string placeholder, std::string help, std::string default_text,
            std::function<void(const Flag&, std::string_view)> set) {
    Flag& f = flags_.emplace_back();
    f.name = std::move(name);
    f.placeholder = std::move(placeholder);
    f.help = std::move(help);
    f.default_text = std::move(default_text);
    f.set = std::move(set);
    return f;
  }
  const Flag* find(std::string_view name) const {
    for (const Flag& f : flags_) {
      if (f.name == name || (!f.alias.empty() && f.alias == name)) return &f;
    }
    return nullptr;
  }

  std::string program_, synopsis_, about_;
  std::deque<Flag> flags_;  // a deque: the Flag& handed out stay valid
  std::vector<std::string> examples_;
  std::size_t literal_from_ = 0;
};

}  // namespace stile_cli
