// libFuzzer target for the safetensors reader: any byte string must either parse into tensors
// whose bytes and float conversions stay inside the input, or throw stile::Error. Anything else
// (a crash, a sanitizer report, another exception type escaping) is a bug.
#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

#include "stile/io/safetensors.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  std::vector<std::byte> bytes(size);
  for (std::size_t i = 0; i < size; ++i) bytes[i] = static_cast<std::byte>(data[i]);
  try {
    const stile::SafetensorsFile file = stile::SafetensorsFile::from_memory(std::move(bytes), "fuzz-input");
    for (const stile::TensorInfo& t : file.tensors()) {
      // Touch every byte of every tensor, so ASan sees any range outside the input.
      unsigned sum = 0;
      for (const std::byte b : file.bytes(t)) sum += static_cast<unsigned>(b);
      if (file.find(t.name) != &t) __builtin_trap();  // lookup must find each listed tensor
      if (stile::dtype_converts_to_f32(t.dtype)) {
        const std::vector<float> values = file.to_f32(t);
        if (values.size() != t.num_elements()) __builtin_trap();
      }
      (void)sum;
    }
  } catch (const stile::Error&) {
    // The expected outcome for malformed input.
  }
  return 0;
}
