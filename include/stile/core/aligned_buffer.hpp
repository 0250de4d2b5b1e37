#pragma once
// Owning, cache-line (or page) aligned storage for packed panels and activations.
#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <new>
#include <span>
#include <type_traits>
#include <utility>

namespace stile {

// 64 bytes: one cache line on every CPU we target, and the widest vector (AVX-512).
inline constexpr std::size_t kCacheLineBytes = 64;

template <class T, std::size_t Alignment = kCacheLineBytes>
class AlignedBuffer {
  static_assert(std::is_trivially_copyable_v<T>, "AlignedBuffer holds plain numbers");
  static_assert((Alignment & (Alignment - 1)) == 0 && Alignment >= alignof(T),
                "Alignment must be a power of two no smaller than alignof(T)");

 public:
  AlignedBuffer() = default;
  explicit AlignedBuffer(std::size_t count) { resize(count); }
  AlignedBuffer(const AlignedBuffer&) = delete;
  AlignedBuffer& operator=(const AlignedBuffer&) = delete;
  AlignedBuffer(AlignedBuffer&& other) noexcept
      : data_(std::exchange(other.data_, nullptr)),
        size_(std::exchange(other.size_, 0)),
        capacity_(std::exchange(other.capacity_, 0)) {}
  AlignedBuffer& operator=(AlignedBuffer&& other) noexcept {
    if (this != &other) {
      std::free(data_);
      data_ = std::exchange(other.data_, nullptr);
      size_ = std::exchange(other.size_, 0);
      capacity_ = std::exchange(other.capacity_, 0);
    }
    return *this;
  }
  ~AlignedBuffer() { std::free(data_); }

  // Discards the contents; grows only (a packing buffer is reused across calls).
  void resize(std::size_t count) {
    if (count <= capacity_) {
      size_ = count;
      return;
    }
    // aligned_alloc wants a size that is a multiple of the alignment.
    const std::size_t bytes = (count * sizeof(T) + Alignment - 1) / Alignment * Alignment;
    void* p = std::aligned_alloc(Alignment, bytes);
    if (p == nullptr) throw std::bad_alloc();
    std::free(data_);
    data_ = static_cast<T*>(p);
    size_ = capacity_ = count;
  }
  void zero() {
    if (size_ != 0) std::memset(data_, 0, size_ * sizeof(T));
  }

  T* data() noexcept { return data_; }
  const T* data() const noexcept { return data_; }
  std::size_t size() const noexcept { return size_; }
  T& operator[](std::size_t i) noexcept { return data_[i]; }
  const T& operator[](std::size_t i) const noexcept { return data_[i]; }
  std::span<T> span() noexcept { return {data_, size_}; }
  std::span<const T> span() const noexcept { return {data_, size_}; }

 private:
  T* data_ = nullptr;
  std::size_t size_ = 0;
  std::size_t capacity_ = 0;
};

}  // namespace stile
