// libFuzzer target for the checkpoint-classifier reader (model/checkpoint_classifier.hpp): any
// byte string, read as a safetensors file, must give no head, a head whose sizes agree, or a
// stile::Error. Seeds: the safetensors fuzzer's (tests/io/fuzz_seeds) and the tiny checkpoint.
#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

#include "stile/model/checkpoint_classifier.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  std::vector<std::byte> bytes(size);
  for (std::size_t i = 0; i < size; ++i) bytes[i] = static_cast<std::byte>(data[i]);
  try {
    const stile::SafetensorsFile file = stile::SafetensorsFile::from_memory(std::move(bytes), "fuzz-input");
    const auto head = stile::read_checkpoint_classifier(file, size % 2 == 0 ? 0 : 32);
    if (head) {
      head->check();
      if (head->bias.size() != head->classes() || head->weight.size() != head->classes() * head->hidden()) {
        __builtin_trap();
      }
    }
  } catch (const stile::Error&) {
    // The expected outcome for malformed input.
  }
  return 0;
}
