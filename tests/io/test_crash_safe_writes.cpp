// Crash-safe writing: a conversion killed with SIGKILL at 20 points spread over its run (a child
// process converting, killed by the parent after i/20 of a measured conversion time) leaves at
// the store's path either the previous store or the complete new one, byte for byte, never a
// partial store that opens; the temporary files a kill leaves behind never open as a store (but
// when the kill fell between the temporary file's last byte and the rename: then it is the whole
// new store) and do not stop a later conversion. The same for the small JSON files the tools write (profile,
// heads, importance, traces: io/json_file.hpp) and for a quantized checkpoint directory
// (model/quantized_checkpoint.hpp). Whatever the timing, each outcome is checked; the timing only
// decides which outcome each kill meets.
#include <catch2/catch.hpp>

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstddef>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <string>
#include <thread>
#include <vector>

#include "stile/io/json_file.hpp"
#include "stile/io/safetensors.hpp"
#include "stile/model/quantized_checkpoint.hpp"
#include "stile/store/shard_converter.hpp"
#include "stile/store/shard_store.hpp"
#include "support/random_bert.hpp"
#include "support/rng.hpp"
#include "support/temp_dir.hpp"

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

namespace {

std::string bytes_of(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

// Runs `work` in a child process; kills it with SIGKILL after `after` (never, when negative).
// Returns true when the child ran to its end (exit 0) before the kill.
bool run_child(const std::function<void()>& work, std::chrono::microseconds after) {
  const pid_t pid = ::fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    try {
      work();
    } catch (...) {
      ::_exit(3);
    }
    ::_exit(0);
  }
  if (after.count() >= 0) {
    std::this_thread::sleep_for(after);
    ::kill(pid, SIGKILL);
  }
  int status = 0;
  REQUIRE(::waitpid(pid, &status, 0) == pid);
  if (WIFEXITED(status)) {
    REQUIRE(WEXITSTATUS(status) == 0);  // a conversion that failed on its own is a bug here
    return true;
  }
  REQUIRE(WIFSIGNALED(status));
  CHECK(WTERMSIG(status) == SIGKILL);
  return false;
}

// A checkpoint big enough that a conversion takes a little while (hidden 64, 4 layers, FFN 256).
void write_model(const fs::path& dir) {
  stile_test::Rng rng{99};
  const auto unit = [&] { return static_cast<float>(rng()); };
  const stile_test::RandomBertScales scales{
      .word_embeddings = 0.05f, .embeddings = 0.05f, .matrices = 0.05f, .biases = 0.05f, .layer_norm = 0.05f};
  std::string vocab = "[PAD]\n[UNK]\n[CLS]\n[SEP]\n[MASK]\n";
  for (int i = 5; i < 1000; ++i) vocab += "tok" + std::to_string(i) + "\n";
  stile_test::write_random_bert(
      dir, {64, 4, 4, 256, 1000, 64}, scales, [&] { return unit() + unit() + unit(); },
      [](const fs::path&, bool written) { REQUIRE(written); }, vocab);
}

std::vector<fs::path> temp_files_of(const fs::path& dir, const std::string& stem) {
  std::vector<fs::path> found;
  for (const fs::directory_entry& e : fs::directory_iterator(dir)) {
    const std::string name = e.path().filename().string();
    if (name != stem && name.find(stem) != std::string::npos) found.push_back(e.path());
  }
  return found;
}

}  // namespace

TEST_CASE("a conversion killed at 20 points leaves the previous store or the new one, never a partial one",
          "[store][crash]") {
  stile_test::TempDir dir("crash_convert");
  const fs::path model = dir.path / "model";
  write_model(model);
  const fs::path out = dir.path / "m.stile";
  stile::ConvertOptions old_options, new_options;
  old_options.bits = {4};
  new_options.bits = {3, 32};
  // The two stores the path may hold, made once undisturbed (conversion is deterministic).
  stile::convert_checkpoint(model, dir.path / "new.stile", new_options);
  const std::string new_bytes = bytes_of(dir.path / "new.stile");
  stile::convert_checkpoint(model, out, old_options);
  const std::string old_bytes = bytes_of(out);
  REQUIRE(old_bytes != new_bytes);

  // The conversion's duration, in a child as the kills will see it.
  const Clock::time_point t0 = Clock::now();
  REQUIRE(run_child([&] { stile::convert_checkpoint(model, dir.path / "timed.stile", new_options); },
                    std::chrono::microseconds(-1)));
  const auto run_time = std::chrono::duration_cast<std::chrono::microseconds>(Clock::now() - t0);
  fs::remove(dir.path / "timed.stile");

  std::size_t killed = 0, finished = 0;
  for (int i = 0; i < 20; ++i) {
    INFO("kill " << i << " at " << (run_time * i / 20).count() << " us of " << run_time.count() << " us");
    // Back to the previous store before each kill (a finished run replaced it).
    if (bytes_of(out) != old_bytes) stile::convert_checkpoint(model, out, old_options);
    const bool done = run_child([&] { stile::convert_checkpoint(model, out, new_options); }, run_time * i / 20);
    (done ? finished : killed) += 1;
    const std::string now = bytes_of(out);
    CHECK((now == old_bytes || now == new_bytes));
    CHECK_NOTHROW(stile::ShardStore::open(out));
    // What a kill leaves behind is a temporary file: refused when opened, unless the kill came
    // between its last byte and the rename, when it is the whole new store.
    for (const fs::path& temp : temp_files_of(dir.path, "m.stile")) {
      bool opens = false;
      try {
        stile::ShardStore::open(temp);
        opens = true;
      } catch (const stile::Error&) {
      }
      if (opens) CHECK(bytes_of(temp) == new_bytes);
    }
  }
  INFO(killed << " runs killed, " << finished << " finished first; " << run_time.count() << " us a run");
  CHECK(killed >= 1);  // the first kill lands at once, long before the rename

  // Leftover temporary files do not confuse a later conversion.
  stile::convert_checkpoint(model, out, new_options);
  CHECK(bytes_of(out) == new_bytes);
}

TEST_CASE("a JSON file written while the writer is killed is the old file or the new one", "[store][crash]") {
  stile_test::TempDir dir("crash_json");
  const fs::path path = dir.path / "profile.json";
  const std::string old_text(1000, 'a');
  std::string new_text;
  for (int i = 0; new_text.size() < (16u << 20); ++i) new_text += "{\"row\": " + std::to_string(i) + "}\n";
  stile::write_file_atomically(path, old_text);
  const Clock::time_point t0 = Clock::now();
  REQUIRE(run_child([&] { stile::write_file_atomically(dir.path / "timed.json", new_text); },
                    std::chrono::microseconds(-1)));
  const auto run_time = std::chrono::duration_cast<std::chrono::microseconds>(Clock::now() - t0);
  for (int i = 0; i < 20; ++i) {
    stile::write_file_atomically(path, old_text);
    run_child([&] { stile::write_file_atomically(path, new_text); }, run_time * i / 20);
    const std::string now = bytes_of(path);
    CHECK((now == old_text || now == new_text));
  }
}

TEST_CASE("a quantized checkpoint written while the writer is killed is absent or complete", "[store][crash]") {
  stile_test::TempDir dir("crash_ckpt");
  const fs::path model = dir.path / "model";
  write_model(model);
  const Clock::time_point t0 = Clock::now();
  REQUIRE(run_child(
      [&] {
        stile::write_quantized_checkpoint(model, dir.path / "timed", stile::LinearFormat::kInt8,
                                          stile::Int8Scheme::kSymmetricPerChannel);
      },
      std::chrono::microseconds(-1)));
  const auto run_time = std::chrono::duration_cast<std::chrono::microseconds>(Clock::now() - t0);
  const std::string complete = bytes_of(dir.path / "timed" / "model.safetensors");
  for (int i = 0; i < 20; ++i) {
    const fs::path out = dir.path / ("out" + std::to_string(i));
    run_child(
        [&] {
          stile::write_quantized_checkpoint(model, out, stile::LinearFormat::kInt8,
                                            stile::Int8Scheme::kSymmetricPerChannel);
        },
        run_time * i / 20);
    if (fs::exists(out)) CHECK(bytes_of(out / "model.safetensors") == complete);
  }
}
