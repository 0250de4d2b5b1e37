// libFuzzer target for the shard store reader (store/shard_store.hpp). Any byte string must either
// be refused with a stile::Error or give a store whose every read stays inside the input; anything
// else (a crash, a sanitizer report, another exception type escaping) is a bug.
//
// Two kinds of input:
//  * one that starts with the magic "STILESHD" is a whole store: opened from memory twice, once
//    with checksums verified (the real path) and once without (so that mutations behind the
//    checksums, in the manifest and in the shard bytes, reach the bounds checks and
//    ShardView::parse), and everything it holds is read;
//  * anything else is a manifest alone, validated against a well-formed header (of each format
//    version) that places it at byte 1 MiB of a file ending with it (parse_manifest, no checksum
//    in the way).
// Seeds: tests/io/fuzz_seeds_store/ (written by test_shard_store "[make-fuzz-seeds]"; the format
// version 2 store with a low-rank word table, tiny_lowrank*, by test_lowrank_embeddings
// "[make-fuzz-seeds]"). Word rows are read, so a low-rank table's token map, U rows and V are too.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "stile/store/shard_store.hpp"

namespace {

void read_everything(const stile::ShardStore& store) {
  const stile::EncoderConfig& c = store.config();
  for (std::size_t l = 0; l < store.num_layers(); ++l) {
    for (std::size_t s = 0; s < store.shards_per_layer(); ++s) {
      for (const unsigned bits : store.bits()) {
        try {
          const stile::ShardBuffer buffer = store.read_shard(l, s, bits);
          // Touch what the view points at, so ASan sees any pointer outside the buffer.
          const stile::ShardView& v = buffer.view();
          unsigned sum = 0;
          for (const stile::DictMatrix& m : v.matrices) {
            if (m.n_outliers != 0) sum += m.outlier_keys[m.n_outliers - 1];
            sum += m.packed[0];
          }
          sum += static_cast<unsigned>(v.ffn_in_bias[store.shard_shape().ffn_rows - 1] != 0.0f);
          (void)sum;
        } catch (const stile::Error&) {
        }
      }
    }
    try {
      const stile::LayerResident r = store.read_resident(l);
      if (r.ln2_beta.size() != c.hidden) __builtin_trap();
    } catch (const stile::Error&) {
    }
  }
  try {
    const stile::EmbeddingResident e = store.read_embeddings();
    if (e.position.size() != c.max_position_embeddings * c.hidden || e.ln_beta.size() != c.hidden) __builtin_trap();
  } catch (const stile::Error&) {
  }
  try {
    (void)store.read_vocab();
  } catch (const stile::Error&) {
  }
  try {
    const std::int32_t last = static_cast<std::int32_t>(c.vocab_size - 1);
    const std::vector<std::int32_t> ids = {0, last, last / 2};
    std::vector<float> rows(ids.size() * c.hidden);
    store.read_word_rows(ids, rows.data());
  } catch (const stile::Error&) {
  }
  (void)store.resident_bytes();
  (void)store.word_table_bytes();
  (void)store.max_word_row_bytes();
}

void fuzz_store(std::span<const std::byte> bytes, bool verify_checksums) {
  stile::ShardStoreOptions options;
  options.verify_checksums = verify_checksums;
  try {
    const stile::ShardStore store = stile::ShardStore::from_memory(bytes, "fuzz-input", options);
    read_everything(store);
  } catch (const stile::Error&) {
  }
}

void fuzz_manifest(std::string_view text, std::uint32_t version) {
  stile::ShardStoreHeader header;
  header.version = version;
  header.manifest_offset = std::uint64_t{1} << 20;
  header.manifest_size = text.size();
  header.file_size = header.manifest_offset + text.size();
  try {
    const stile::ShardStoreManifest m = stile::shard_store_detail::parse_manifest(text, header, "fuzz-manifest");
    if (m.layers.size() != m.config.num_layers || m.bits.empty()) __builtin_trap();
    for (const auto& layer : m.layers) {
      if (layer.shards.size() != m.shards_per_layer) __builtin_trap();
      for (const auto& shard : layer.shards) {
        if (shard.size() != m.bits.size()) __builtin_trap();
        for (const stile::ShardVersionInfo& v : shard) {
          if (v.offset % stile::kShardStoreAlign != 0 || v.offset + v.size > header.manifest_offset) __builtin_trap();
        }
      }
    }
    // What the writer would write for it parses back the same.
    const std::string again = stile::shard_store_detail::manifest_json(m, header.version).dump();
    stile::ShardStoreHeader h2 = header;
    h2.manifest_size = again.size();
    h2.file_size = h2.manifest_offset + again.size();
    const stile::ShardStoreManifest m2 = stile::shard_store_detail::parse_manifest(again, h2, "fuzz-manifest-again");
    if (m2.layers.size() != m.layers.size() || m2.bits != m.bits) __builtin_trap();
  } catch (const stile::Error&) {
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::span<const std::byte> bytes(reinterpret_cast<const std::byte*>(data), size);
  if (size >= stile::kShardStoreMagic.size() &&
      std::memcmp(data, stile::kShardStoreMagic.data(), stile::kShardStoreMagic.size()) == 0) {
    fuzz_store(bytes, true);
    fuzz_store(bytes, false);
  } else {
    // Under a header of each version the reader knows (a manifest must say its header's version).
    for (std::uint32_t v = stile::kShardStoreMinFormatVersion; v <= stile::kShardStoreFormatVersion; ++v) {
      fuzz_manifest(std::string_view(reinterpret_cast<const char*>(data), size), v);
    }
  }
  return 0;
}
