#pragma once
// Where a forward pass spends its time, per operator class: a per-operator breakdown for benchmarks
// (bench_bert --breakdown). A null OpTimes* costs nothing: OpTimer reads no clock then.
#include <array>
#include <chrono>
#include <cstddef>
#include <cstdint>

namespace stile {

enum class OpKind : std::uint8_t { kEmbedding, kQkv, kAttention, kAttnOut, kLayerNorm, kFfnIn, kGelu, kFfnOut, kCount };
inline constexpr std::size_t kOpKinds = static_cast<std::size_t>(OpKind::kCount);

inline const char* to_string(OpKind k) {
  constexpr std::array<const char*, kOpKinds> names{"embedding", "qkv",    "attention", "attn_out",
                                                    "layernorm", "ffn_in", "gelu",      "ffn_out"};
  return names[static_cast<std::size_t>(k)];
}

struct OpTimes {
  std::array<double, kOpKinds> seconds{};
  double& operator[](OpKind k) { return seconds[static_cast<std::size_t>(k)]; }
  double total() const {
    double t = 0;
    for (double s : seconds) t += s;
    return t;
  }
};

// Charges the time since the previous lap (or construction) to an operator class.
class OpTimer {
 public:
  using Clock = std::chrono::steady_clock;
  explicit OpTimer(OpTimes* times) : times_(times) {
    if (times_ != nullptr) last_ = Clock::now();
  }
  void lap(OpKind k) {
    if (times_ == nullptr) return;
    const Clock::time_point now = Clock::now();
    (*times_)[k] += std::chrono::duration<double>(now - last_).count();
    last_ = now;
  }

 private:
  OpTimes* times_;
  Clock::time_point last_{};
};

}  // namespace stile
