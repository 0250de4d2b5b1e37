#pragma once
// A shard store converted on the spot into a temporary directory (removed with it), from the
// default model (support/default_model.hpp) or from a checkpoint the test writes there.
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include "stile/store/shard_converter.hpp"
#include "support/temp_dir.hpp"

namespace stile_test {

struct ConvertedStore {
  TempDir dir;
  std::filesystem::path store;  // dir.path / name
  stile::ConvertReport report;

  // The checkpoint in `checkpoint`, converted at `bits` into the store `name`.
  ConvertedStore(const std::string& name, const std::filesystem::path& checkpoint, std::vector<unsigned> bits)
      : dir(name), store(dir.path / name) {
    convert(checkpoint, std::move(bits));
  }
  // The checkpoint that write_checkpoint(dir) writes into the temporary directory, converted.
  ConvertedStore(const std::string& name, const std::function<void(const std::filesystem::path&)>& write_checkpoint,
                 std::vector<unsigned> bits)
      : dir(name), store(dir.path / name) {
    write_checkpoint(dir.path);
    convert(dir.path, std::move(bits));
  }

 private:
  void convert(const std::filesystem::path& checkpoint, std::vector<unsigned> bits) {
    stile::ConvertOptions options;
    options.bits = std::move(bits);
    report = stile::convert_checkpoint(checkpoint, store, options);
  }
};

}  // namespace stile_test
