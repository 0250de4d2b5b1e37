#pragma once
// The split of a labelled training set that every tool uses (SST-2's train.tsv: heads,
// importance profiles, reported accuracies), as the files they write record it. A runtime header:
// the heads and importance files (model/heads_file.hpp, plan/importance.hpp) record the split
// they were made on; computing it (the seeded permutation) is calibrate/sst2.hpp's job.
#include <cstddef>
#include <cstdint>

namespace stile {

// The split of SST-2's train.tsv used everywhere (heads, importance); recorded in the files it
// produced, so a tool reading them uses the same rows. calibrate/sst2.hpp's split_sst2 makes the
// parts: one seeded permutation of the rows, its first `train` rows, then the next `calibration`.
struct Sst2Split {
  std::uint64_t seed = 20261123;
  std::size_t train = 8000;        // head training: the permutation's first `train` rows
  std::size_t calibration = 1000;  // calibration: the next `calibration` rows
  bool operator==(const Sst2Split&) const = default;
};

}  // namespace stile
