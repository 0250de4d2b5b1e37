#pragma once
// A tiny random BERT for engine tests that need a real store but not a real model (faults,
// threads, crash-safe conversion): hidden 32, 4 heads, FFN 64, 50 tokens (the tokenizer's specials
// first), 64 positions; `layers` layers. Converting it takes milliseconds.
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <string>

#include <catch2/catch.hpp>

#include "stile/plan/device_profile.hpp"
#include "stile/store/shard_store.hpp"
#include "stile/text/wordpiece.hpp"
#include "support/random_bert.hpp"
#include "support/rng.hpp"

namespace stile_test {

inline void write_tiny_bert(const std::filesystem::path& dir, std::size_t layers, std::uint64_t seed = 2222) {
  Rng rng{seed};
  const auto unit = [&] { return static_cast<float>(rng()); };
  const RandomBertScales scales{
      .word_embeddings = 0.05f, .embeddings = 0.05f, .matrices = 0.05f, .biases = 0.05f, .layer_norm = 0.05f};
  std::string vocab = "[PAD]\n[UNK]\n[CLS]\n[SEP]\n[MASK]\n";  // the engine's tokenizer needs these
  for (int i = 5; i < 50; ++i) vocab += "tok" + std::to_string(i) + "\n";
  write_random_bert(
      dir, {32, layers, 4, 64, 50, 64}, scales, [&] { return unit() + unit() + unit(); },
      [](const std::filesystem::path&, bool written) { REQUIRE(written); }, vocab);
}

// A request of n tokens of the tiny vocabulary, varied by `salt` (ids 5..49; some repeat).
inline stile::Encoding tiny_tokens(std::size_t n, std::size_t salt = 0) {
  stile::Encoding e;
  for (std::size_t i = 0; i < n; ++i) {
    e.input_ids.push_back(static_cast<std::int32_t>(5 + (i * 7 + salt * 13) % 45));
    e.token_type_ids.push_back(0);
    e.attention_mask.push_back(1);
  }
  return e;
}

// A made-up device profile for a tiny store (4 shards a layer, bits {4, 32}): compute 0.2 ms x
// shards x (length bucket index + 1) x (bitwidth index + 1) a layer, 0.4 / 2.0 ms a version's
// read. Plans it gives change with the target and the preload budget, which is what the engine
// tests need of it.
inline stile::DeviceProfile tiny_profile(const std::filesystem::path& store) {
  const stile::ShardStore s = stile::ShardStore::open(store);
  stile::DeviceProfile p;
  p.machine = {{"store", store.filename().string()}};
  p.bits = {4, 32};
  p.io_ms = {0.4, 2.0};
  p.shard_bytes = {static_cast<double>(s.version_info(0, 0, 4).size), static_cast<double>(s.version_info(0, 0, 32).size)};
  p.lengths = {16, 32, 64};
  p.shards_per_layer = s.shards_per_layer();
  p.num_layers = s.num_layers();
  for (std::size_t b = 0; b < p.bits.size(); ++b) {
    auto& per_length = p.compute_ms.emplace_back();
    for (std::size_t i = 0; i < p.lengths.size(); ++i) {
      auto& per_m = per_length.emplace_back();
      for (std::size_t m = 1; m <= p.shards_per_layer; ++m) per_m.push_back(0.2 * static_cast<double>(m * (i + 1) * (b + 1)));
    }
  }
  return p;
}

}  // namespace stile_test
