// The tokenizer.json pre-tokenizers (text/pre_tokenizers.hpp) and regexes (text/regex.hpp):
// pieces and their original byte offsets against the reference (data/pre_tokenizers.jsonl,
// written by scripts/make_pre_tokenizer_goldens.py from tokenizers 0.23.3: every pre-tokenizer,
// every split behaviour, regexes that match empty, samples over all code points), onig's
// empty-match rule, the Oniguruma -> PCRE2 translation, and the reader's errors.
#include <catch2/catch.hpp>

#include <cstddef>
#include <cstdint>
#include <fstream>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "golden_files.hpp"
#include "stile/core/error.hpp"
#include "stile/text/pre_tokenizers.hpp"
#include "stile/text/regex.hpp"

using namespace stile::tok;
using Catch::Matchers::Contains;

namespace {

const JsonPlace kPlace{"tok.json", "pre_tokenizer"};

struct Piece {
  std::string text;
  std::uint32_t begin, end;
  friend bool operator==(const Piece&, const Piece&) = default;
};

std::vector<Piece> run(const PreTokenizer& pre, const std::string& text) {
  PreTokenizedString p(NormalizedString::from_original(text, 0, text.size()));
  pre.pre_tokenize(p);
  std::vector<Piece> out;
  for (const Split& s : p.splits()) {
    std::string piece;
    for (const char32_t c : s.normalized.chars()) stile::utf8::append(piece, c);
    const Origin o = s.normalized.original_range(0, s.normalized.size());
    out.push_back({piece, o.begin, o.end});
  }
  return out;
}

std::unique_ptr<const PreTokenizer> read(const std::string& json_text) {
  return read_pre_tokenizer(nlohmann::json::parse(json_text), kPlace);
}

std::string describe(const std::vector<Piece>& pieces) {
  std::string s;
  for (const Piece& p : pieces) s += "[" + p.text + " " + std::to_string(p.begin) + "," + std::to_string(p.end) + "] ";
  return s;
}

std::string matches_text(const std::vector<PatternMatch>& ms) {
  std::string s;
  for (const PatternMatch& m : ms) {
    s += std::to_string(m.begin) + "-" + std::to_string(m.end) + (m.is_match ? "T " : "F ");
  }
  return s;
}


}  // namespace

TEST_CASE("pre-tokenizers give the reference's pieces and offsets", "[tokenizer][pre_tokenizers]") {
  std::ifstream in(stile_test::data_dir() / "pre_tokenizers.jsonl", std::ios::binary);
  REQUIRE(in);
  std::string line;
  REQUIRE(std::getline(in, line));
  const nlohmann::json configs = nlohmann::json::parse(line).at("configs");
  std::map<std::string, std::unique_ptr<const PreTokenizer>> pres;
  for (auto it = configs.begin(); it != configs.end(); ++it) pres[it.key()] = read_pre_tokenizer(it.value(), kPlace);
  std::map<std::string, int> cases;
  std::size_t total = 0;
  while (std::getline(in, line)) {
    const nlohmann::json j = nlohmann::json::parse(line);
    const std::string name = j.at("name").get<std::string>();
    const std::string text = j.at("text").get<std::string>();
    std::vector<Piece> want;
    for (const auto& p : j.at("pieces")) {
      want.push_back({p[0].get<std::string>(), p[1].get<std::uint32_t>(), p[2].get<std::uint32_t>()});
    }
    const std::vector<Piece> got = run(*pres.at(name), text);
    INFO(name << " on " << nlohmann::json(text).dump());
    if (got != want) CHECK(describe(got) == describe(want));
    ++cases[name];
    ++total;
  }
  CHECK(total > 1000);
  CHECK(cases.size() == configs.size());  // every configuration has cases
}

TEST_CASE("regex: onig's find_iter empty-match rule", "[tokenizer][regex]") {
  // An empty match right where the previous match ended is skipped (one character on); any other
  // empty match is kept. Values as the reference's Split shows them (merged_with_next on "aab"
  // gives "aab", so there is no empty match at 2).
  const Regex a_star = Regex::compile("a*", kPlace);
  CHECK(matches_text(a_star.find_matches(U"aab")) == "0-2T 2-3F 3-3T ");
  CHECK(matches_text(a_star.find_matches(U"bc")) == "0-0T 0-1F 1-1T 1-2F 2-2T ");
  CHECK(matches_text(a_star.find_matches(U"")) == "0-0F ");
  const Regex alt = Regex::compile("|a", kPlace);  // the empty branch wins: 'a' never matches
  CHECK(matches_text(alt.find_matches(U"aab")) == "0-0T 0-1F 1-1T 1-2F 2-2T 2-3F 3-3T ");
  const Regex ws = Regex::compile("\\s+", kPlace);
  CHECK(matches_text(ws.find_matches(U"   a   b   ")) == "0-3T 3-4F 4-7T 7-8F 8-11T ");
  // Look-behind and \b see the text before the search start.
  const Regex behind = Regex::compile("(?<=a)b|\\bc", kPlace);
  CHECK(matches_text(behind.find_matches(U"abbc ac c")) == "0-1F 1-2T 2-8F 8-9T ");
}

TEST_CASE("regex: Oniguruma syntax translated to PCRE2", "[tokenizer][regex]") {
  const auto m = [](const char* pattern, const std::u32string& text) {
    return matches_text(Regex::compile(pattern, kPlace).find_matches(text));
  };
  CHECK(m("\\h+", U"ag09fz") == "0-1T 1-2F 2-5T 5-6F ");  // \h: a hex digit
  CHECK(m("\\H", U"a1g") == "0-2F 2-3T ");
  CHECK(m("[\\h]+", U"xAf") == "0-1F 1-3T ");
  CHECK(m("(?m)a.b", U"a\nb") == "0-3T ");             // (?m): dot matches newline
  CHECK(m("a.b", U"a\nb") == "0-3F ");
  CHECK(m("^x|y$", U"x\nxy\ny") == "0-1T 1-2F 2-3T 3-4T 4-5F 5-6T ");  // line anchors
  CHECK(m("\\u00e9", U"e\u00e9") == "0-1F 1-2T ");
  CHECK(m("\\v", U"\v\n") == "0-1T 1-2F ");            // \v: U+000B only
  CHECK(m("a{,2}", U"aaab") == "0-2T 2-3T 3-4F 4-4T ");  // {,n}: {0,n}
  // Oniguruma's classes: \s lacks U+180E, \w lacks U+200C/U+200D and has marks, \d and \p{L}
  // know Unicode 16 (U+10D40 is a Garay digit, U+1C89 a Cyrillic letter).
  CHECK(m("\\s", U"\u180e\u0085") == "0-1F 1-2T ");
  CHECK(m("\\w+", U"a\u200cb\u0301") == "0-1T 1-2F 2-4T ");
  CHECK(m("\\d", U"\U00010D40") == "0-1T ");
  CHECK(m("\\p{L}", U"\u1C89") == "0-1T ");
  CHECK(m("[^\\s\\p{L}]", U"\u1C89 !") == "0-2F 2-3T ");
  CHECK(m("\\S+", U"\u180e ") == "0-1T 1-2F ");
  CHECK(m("\\p{Han}", U"\u3001\u4e00") == "0-1F 1-2T ");  // Script, not Script_Extensions
}

TEST_CASE("regex: what has no PCRE2 form is refused by name", "[tokenizer][regex]") {
  CHECK_THROWS_WITH(Regex::compile("(?~abc)", kPlace), Contains("absent operator") && Contains("tok.json"));
  CHECK_THROWS_WITH(Regex::compile("\\y", kPlace), Contains("text segment"));
  CHECK_THROWS_WITH(Regex::compile("[a-z&&[^aeiou]]", kPlace), Contains("&&"));
  CHECK_THROWS_WITH(Regex::compile("[a[b]]", kPlace), Contains("nested character class"));
  CHECK_THROWS_WITH(Regex::compile("(?W)a", kPlace), Contains("option letter"));
  CHECK_THROWS_WITH(Regex::compile("[\\W]", kPlace), Contains("negated Unicode class"));
  CHECK_THROWS_WITH(Regex::compile("(a", kPlace), Contains("not a valid regex") && Contains("\"(a\""));
  CHECK_THROWS_WITH(Regex::compile("\\u12", kPlace), Contains("four hex digits"));
}

TEST_CASE("regex: string patterns and escaping", "[tokenizer][regex]") {
  CHECK(matches_text(find_string_matches(U"aabbab", U"ab")) == "0-1F 1-3T 3-4F 4-6T ");
  CHECK(matches_text(find_string_matches(U"aaa", U"")) == "0-3F ");
  CHECK(matches_text(find_string_matches(U"", U"a")) == "0-0F ");
  CHECK(matches_text(find_string_matches(U"aaaa", U"aa")) == "0-2T 2-4T ");
  const Regex lit = Regex::literal(U".*[x]", kPlace);
  CHECK(matches_text(lit.find_matches(U"ab.*[x]c")) == "0-2F 2-7T 7-8F ");
}

TEST_CASE("regex: a const Regex is usable from many threads", "[tokenizer][regex]") {
  const Regex re = Regex::compile(kGpt2Pattern, kPlace);
  const std::u32string text = U"Hello world's  123 !!  caf\u00e9 \u65e5\u672c ";
  const std::string want = matches_text(re.find_matches(text));
  std::vector<std::thread> threads;
  std::vector<int> ok(4, 0);
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      int good = 0;
      for (int i = 0; i < 500; ++i) good += matches_text(re.find_matches(text)) == want ? 1 : 0;
      ok[static_cast<std::size_t>(t)] = good;
    });
  }
  for (auto& th : threads) th.join();
  for (const int good : ok) CHECK(good == 500);
}

TEST_CASE("ByteLevel maps UTF-8 bytes to GPT-2's alphabet with the reference's origins", "[tokenizer][pre_tokenizers]") {
  const auto pre = read(R"({"type":"ByteLevel","add_prefix_space":true,"trim_offsets":true})");
  const auto* byte_level = dynamic_cast<const ByteLevel*>(pre.get());
  REQUIRE(byte_level != nullptr);
  CHECK(byte_level->trim_offsets());
  CHECK(byte_level->use_regex());
  // "é" is C3 A9 -> "Ã©"; both characters come from the 2 bytes of "é"; the added space from
  // the first character.
  const auto pieces = run(*pre, "\xc3\xa9 x");
  REQUIRE(pieces.size() == 2);
  CHECK(pieces[0] == Piece{"\xc4\xa0\xc3\x83\xc2\xa9", 0, 2});
  CHECK(pieces[1] == Piece{"\xc4\xa0x", 2, 4});
  CHECK(pre_tok_chars::byte_chars()[0] == 0x100);
  CHECK(pre_tok_chars::byte_chars()[' '] == 0x120);
  CHECK(pre_tok_chars::byte_chars()[0xAD] == 0x143);
}

TEST_CASE("read_pre_tokenizer: malformed JSON names the field", "[tokenizer][pre_tokenizers]") {
  CHECK(read_pre_tokenizer(nullptr, kPlace) == nullptr);
  const auto fails = [](const char* json, const char* needle) {
    INFO(json);
    CHECK_THROWS_WITH(read(json), Contains(needle) && Contains("tok.json"));
  };
  fails(R"([1])", "must be a JSON object or null");
  fails(R"({"add_prefix_space":true})", "missing \"type\"");
  fails(R"({"type":7})", "pre_tokenizer.type: must be a string");
  fails(R"({"type":"Replace"})", "\"Replace\" is not a pre-tokenizer stile reads");
  fails(R"({"type":"Nope"})", "pre_tokenizer.type: \"Nope\"");
  fails(R"({"type":"ByteLevel","trim_offsets":true})", "missing \"add_prefix_space\"");
  fails(R"({"type":"ByteLevel","add_prefix_space":true})", "missing \"trim_offsets\"");
  fails(R"({"type":"ByteLevel","add_prefix_space":1,"trim_offsets":true})", "pre_tokenizer.add_prefix_space: must be true or false");
  fails(R"({"type":"ByteLevel","add_prefix_space":true,"trim_offsets":true,"use_regex":"y"})", "use_regex");
  fails(R"({"type":"Metaspace"})", "missing \"replacement\"");
  fails(R"({"type":"Metaspace","replacement":"ab"})", "pre_tokenizer.replacement: must be one character");
  fails(R"({"type":"Metaspace","replacement":5})", "pre_tokenizer.replacement: must be a string");
  fails(R"({"type":"Metaspace","replacement":"_","prepend_scheme":"First"})", "unknown prepend scheme");
  fails(R"({"type":"Metaspace","replacement":"_","add_prefix_space":false})", "add_prefix_space: false does not match");
  fails(R"({"type":"Metaspace","replacement":"_","split":"no"})", "pre_tokenizer.split");
  fails(R"({"type":"Split","pattern":{"String":"a"},"behavior":"Isolated"})", "missing \"invert\"");
  fails(R"({"type":"Split","pattern":{"String":"a"},"behavior":"isolated","invert":false})", "pre_tokenizer.behavior: unknown behavior");
  fails(R"({"type":"Split","pattern":"a","behavior":"Isolated","invert":false})", "pre_tokenizer.pattern: must be");
  fails(R"({"type":"Split","pattern":{"Glob":"a"},"behavior":"Isolated","invert":false})", "unknown pattern kind \"Glob\"");
  fails(R"({"type":"Split","pattern":{"Regex":3},"behavior":"Isolated","invert":false})", "pre_tokenizer.pattern.Regex: must be a string");
  fails(R"({"type":"Split","pattern":{"Regex":"(a"},"behavior":"Isolated","invert":false})", "pre_tokenizer.pattern.Regex: pattern \"(a\" is not a valid regex");
  fails(R"({"type":"Split","pattern":{"Regex":"a"},"behavior":"Isolated","invert":0})", "pre_tokenizer.invert");
  fails(R"({"type":"Punctuation","behavior":"Sideways"})", "unknown behavior \"Sideways\"");
  fails(R"({"type":"Digits"})", "missing \"individual_digits\"");
  fails(R"({"type":"Digits","individual_digits":null})", "individual_digits: must be true or false");
  fails(R"({"type":"CharDelimiterSplit","delimiter":""})", "delimiter: must be one character");
  fails(R"({"type":"FixedLength","length":0})", "pre_tokenizer.length: must be between 1");
  fails(R"({"type":"FixedLength","length":-3})", "\"length\" must be a whole number");
  fails(R"({"type":"Sequence"})", "missing \"pretokenizers\"");
  fails(R"({"type":"Sequence","pretokenizers":{}})", "pre_tokenizer.pretokenizers: must be a JSON array");
  fails(R"({"type":"Sequence","pretokenizers":[{"type":"Whitespace"},{"type":"Digits"}]})",
        "pre_tokenizer.pretokenizers[1]: missing \"individual_digits\"");
  fails(R"({"type":"Sequence","pretokenizers":[null]})", "pretokenizers[0]: must be a pre-tokenizer");
}

TEST_CASE("read_pre_tokenizer: defaults and ignored keys are the reference's", "[tokenizer][pre_tokenizers]") {
  // Punctuation defaults to Isolated, FixedLength to 5, use_regex to true, Metaspace's split to
  // true and prepend_scheme to always; keys the reference ignores are ignored.
  CHECK(describe(run(*read(R"({"type":"Punctuation"})"), "a,b")) == "[a 0,1] [, 1,2] [b 2,3] ");
  CHECK(describe(run(*read(R"({"type":"FixedLength"})"), "abcdefg")) == "[abcde 0,5] [fg 5,7] ");
  CHECK(describe(run(*read(R"({"type":"Metaspace","replacement":"_","zzz":1})"), "a b")) == "[_a 0,1] [_b 1,3] ");
  CHECK(describe(run(*read(R"({"type":"Metaspace","replacement":"_","add_prefix_space":true,"prepend_scheme":"never"})"),
                     "a b")) == "[a 0,1] [_b 1,3] ");
}

TEST_CASE("ByteLevel's hand-written GPT-2 matcher equals the regex over all code points", "[tokenizer][pre_tokenizers]") {
  // The regex (PCRE2 with Oniguruma's classes) is itself checked against the reference by the
  // goldens; here the hand-written matcher is checked against it, over every code point alone, in
  // runs, between letters, after a space, an apostrophe and spaces, before spaces.
  const Regex re = Regex::compile(kGpt2Pattern, kPlace);
  std::vector<PatternMatch> fast;
  std::size_t texts = 0;
  std::size_t differ = 0;
  const auto check = [&](const std::u32string& text) {
    find_gpt2_matches(text, fast);
    const std::vector<PatternMatch> slow = re.find_matches(text);
    ++texts;
    if (matches_text(fast) != matches_text(slow)) {
      if (++differ <= 3) CHECK(matches_text(fast) == matches_text(slow));
    }
  };
  for (char32_t first = 0; first < 0x110000; first += 256) {
    std::u32string run, between, spaced, quoted;
    for (char32_t c = first; c < first + 256; ++c) {
      if (c >= 0xD800 && c <= 0xDFFF) continue;
      run += c;
      between += U"a";
      between += c;
      between += U"1 ";
      spaced += U" ";
      spaced += c;
      spaced += c;
      spaced += U"  \n";
      quoted += U"'";
      quoted += c;
      quoted += U" \t";
      quoted += c;
    }
    if (run.empty()) continue;
    check(run);
    check(between);
    check(spaced);
    check(quoted);
  }
  for (const char32_t* text : {U"", U" ", U"  ", U"a  ", U"  a", U"'s'S're'll'd'x 'm", U"x\u00a0 y \u3000\u3000z"}) check(text);
  CHECK(texts > 17000);
  CHECK(differ == 0);
}
