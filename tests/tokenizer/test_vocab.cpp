// vocab.txt parsing: HF's reading rules (line ends, duplicates) and clear errors for bad files.
#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>
#include <string>

#include "stile/core/error.hpp"
#include "stile/text/vocab.hpp"

using stile::Vocab;
using Catch::Matchers::Contains;

namespace {

const std::string kSpecials = "[PAD]\n[UNK]\n[CLS]\n[SEP]\n";

// A file in the test's temporary directory, removed at scope exit.
struct TempFile {
  explicit TempFile(const std::string& contents) {
    path = std::filesystem::temp_directory_path() / ("stile_vocab_test_" + std::to_string(counter++) + ".txt");
    std::ofstream(path, std::ios::binary) << contents;
  }
  ~TempFile() { std::filesystem::remove(path); }
  TempFile(const TempFile&) = delete;
  TempFile& operator=(const TempFile&) = delete;
  std::filesystem::path path;
  static inline int counter = 0;
};

}  // namespace

TEST_CASE("vocab ids are line numbers; tokens are whole lines", "[tokenizer][vocab]") {
  const Vocab vocab = Vocab::parse(kSpecials + "hello\n##lo\n with space \n", "mem.txt");
  CHECK(vocab.size() == 7);
  CHECK(vocab.id_of("[PAD]") == 0);
  CHECK(vocab.id_of("hello") == 4);
  CHECK(vocab.find("##lo") == 5);
  CHECK(vocab.find_continuation("lo") == 5);
  CHECK_FALSE(vocab.find_continuation("hello"));
  CHECK(vocab.find(" with space ") == 6);  // no trimming, as HF's load_vocab
  CHECK_FALSE(vocab.find("with space"));
  CHECK(vocab.token(4) == "hello");
  CHECK(vocab.longest_token_bytes() == 12);
  CHECK(vocab.longest_continuation_bytes() == 2);
  CHECK_THROWS_WITH(vocab.token(7), Contains("mem.txt") && Contains("out of range"));
  CHECK_THROWS_AS(vocab.token(-1), stile::Error);
}

TEST_CASE("vocab lines end at LF, CRLF or CR, like Python's universal newlines", "[tokenizer][vocab]") {
  const Vocab vocab = Vocab::parse("[PAD]\r\n[UNK]\r[CLS]\n[SEP]\r\n\r\nlast", "mem.txt");
  CHECK(vocab.size() == 6);
  CHECK(vocab.id_of("[UNK]") == 1);
  CHECK(vocab.id_of("[SEP]") == 3);
  CHECK(vocab.find("") == 4);  // an empty line is an empty token (HF keeps its id)
  CHECK(vocab.id_of("last") == 5);
  CHECK(Vocab::parse(kSpecials, "m").size() == 4);  // no token after the final line end
}

TEST_CASE("a duplicated token maps to its last id, as in HF", "[tokenizer][vocab]") {
  const Vocab vocab = Vocab::parse(kSpecials + "dup\nother\ndup\n##x\n##x\n", "mem.txt");
  CHECK(vocab.size() == 9);
  CHECK(vocab.id_of("dup") == 6);
  CHECK(vocab.token(4) == "dup");  // the earlier line keeps its id's token
  CHECK(vocab.find_continuation("x") == 8);
}

TEST_CASE("bad vocab files fail with the file and what is wrong", "[tokenizer][vocab]") {
  CHECK_THROWS_WITH(Vocab::parse("", "empty.txt"), Contains("empty.txt") && Contains("empty"));
  CHECK_THROWS_WITH(Vocab::parse("[PAD]\n[UNK]\n[CLS]\n", "nosep.txt"), Contains("nosep.txt") && Contains("[SEP]"));
  CHECK_THROWS_WITH(Vocab::parse("[pad]\n[unk]\n[cls]\n[sep]\n", "lower.txt"), Contains("[CLS]"));
  CHECK_THROWS_WITH(Vocab::parse(kSpecials + "ok\nbad\xff\n", "utf.txt"),
                    Contains("utf.txt") && Contains("line 6") && Contains("UTF-8") && Contains("byte 4"));
  CHECK_THROWS_WITH(Vocab::parse("\xc3(\n" + kSpecials, "first.txt"), Contains("line 1"));
  CHECK_THROWS_WITH(Vocab::load("/nonexistent/dir/vocab.txt"),
                    Contains("/nonexistent/dir/vocab.txt") && Contains("cannot open"));
  CHECK_THROWS_AS(Vocab::parse("\n\n\n", "blank.txt"), stile::Error);
  CHECK_THROWS_AS(Vocab::parse(std::string("\0\0\0", 3), "nul.txt"), stile::Error);
}

TEST_CASE("vocab files load from disk", "[tokenizer][vocab]") {
  const TempFile file(kSpecials + "caf\xc3\xa9\n");
  const Vocab vocab = Vocab::load(file.path);
  CHECK(vocab.size() == 5);
  CHECK(vocab.id_of("caf\xc3\xa9") == 4);
  CHECK(vocab.source() == file.path.string());
  const TempFile empty("");
  CHECK_THROWS_WITH(Vocab::load(empty.path), Contains(empty.path.string()) && Contains("empty"));
  const TempFile missing_unk("[PAD]\n[CLS]\n[SEP]\n");
  CHECK_THROWS_WITH(Vocab::load(missing_unk.path), Contains(missing_unk.path.string()) && Contains("[UNK]"));
}
