#pragma once
// The working-memory arena of a request: one block reserved up front, handed out by bumping an
// offset, released in stack order. It counts what it hands out, so tests and benchmarks read the
// true peak working memory of an operator rather than an estimate, and an operator that needs
// more than it planned fails loudly instead of allocating behind the planner's back.
//
//   Arena arena(bytes);
//   { ArenaScope scope(arena); auto kv = scope.take<float>(tokens * 2 * d); ... }  // released
//   arena.peak_bytes();
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>

#include "stile/core/aligned_buffer.hpp"
#include "stile/core/error.hpp"

namespace stile {

class Arena {
 public:
  // Every allocation starts on a cache line (SIMD loads, and no false sharing between the
  // per-thread slices that operators carve out of one allocation).
  static constexpr std::size_t kAlign = kCacheLineBytes;

  static constexpr std::size_t round_up(std::size_t bytes) noexcept { return (bytes + kAlign - 1) / kAlign * kAlign; }

  Arena() = default;
  explicit Arena(std::size_t capacity_bytes) { reserve(capacity_bytes); }

  // Grows the block to at least `bytes`; only while nothing is allocated (pointers stay valid).
  void reserve(std::size_t bytes) {
    if (bytes <= block_.size()) return;
    require(used_ == 0, "arena: cannot grow while " + std::to_string(used_) + " bytes are in use");
    block_.resize(round_up(bytes));
  }

  // `count` Ts, 64-byte aligned, uninitialized. Throws if the reserved block is too small: the
  // operator's analytic peak (what it reserved) was wrong.
  template <class T>
  std::span<T> allocate(std::size_t count) {
    const std::size_t bytes = round_up(count * sizeof(T));
    if (used_ + bytes > block_.size()) {
      throw Error("arena: an allocation of " + std::to_string(bytes) + " bytes does not fit (" + std::to_string(used_) +
                  " of " + std::to_string(block_.size()) + " bytes in use)");
    }
    T* p = reinterpret_cast<T*>(block_.data() + used_);
    used_ += bytes;
    peak_ = used_ > peak_ ? used_ : peak_;
    return {p, count};
  }

  std::size_t used_bytes() const noexcept { return used_; }
  std::size_t peak_bytes() const noexcept { return peak_; }
  std::size_t capacity_bytes() const noexcept { return block_.size(); }
  void reset_peak() noexcept { peak_ = used_; }

  std::size_t mark() const noexcept { return used_; }
  void release(std::size_t mark) {
    require(mark <= used_, "arena: release past the current top");
    used_ = mark;
  }

 private:
  AlignedBuffer<std::byte> block_;
  std::size_t used_ = 0;
  std::size_t peak_ = 0;
};

// Releases everything allocated through it (or after it was made) when it goes out of scope.
class ArenaScope {
 public:
  explicit ArenaScope(Arena& arena) : arena_(arena), mark_(arena.mark()) {}
  ArenaScope(const ArenaScope&) = delete;
  ArenaScope& operator=(const ArenaScope&) = delete;
  ~ArenaScope() { arena_.release(mark_); }
  template <class T>
  std::span<T> take(std::size_t count) {
    return arena_.template allocate<T>(count);
  }

 private:
  Arena& arena_;
  std::size_t mark_;
};

}  // namespace stile
