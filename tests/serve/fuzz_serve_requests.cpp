// libFuzzer target for stile-serve's request readers (tools/serve/api_requests.hpp): the first byte
// picks the endpoint, the rest is the body. Every input must be read into a request that keeps the
// contract (one text at least, no more than the limit) or refused with ApiError (400 or 413) naming
// the problem; nothing else may escape. Seeds: tests/serve/fuzz_seeds_requests/.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "serve/api_requests.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size == 0) return 0;
  const std::string_view body(reinterpret_cast<const char*>(data + 1), size - 1);
  const stile_serve::Limits limits{.max_texts = 8};
  const auto check = [&](std::size_t texts) {
    if (texts == 0 || texts > limits.max_texts) std::abort();
  };
  try {
    switch (data[0] % 4) {
      case 0: check(stile_serve::parse_openai_embeddings(body, limits).texts.size()); break;
      case 1: check(stile_serve::parse_tei_embed(body, limits).texts.size()); break;
      case 2: check(stile_serve::parse_rerank(body, limits).texts.size()); break;
      default: check(stile_serve::parse_classify(body, limits).inputs.size()); break;
    }
  } catch (const stile_serve::ApiError& e) {
    if ((e.status != 400 && e.status != 413) || e.message.empty()) std::abort();
  }
  return 0;
}
