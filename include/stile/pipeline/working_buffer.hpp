#pragma once
// A request's working buffer: what the engine holds only while a request runs (released after it
// unless the engine keeps it): one read slot per layer in flight (the compressed shard versions
// read for that layer), the word rows read, the hidden states, and the layer compute's workspace
// (untiled activations) or arena (tiles).
#include <cstddef>
#include <vector>

#include "stile/core/aligned_buffer.hpp"
#include "stile/core/arena.hpp"
#include "stile/ops/encoder_layer.hpp"

namespace stile {

struct WorkingBuffer {
  using Bytes = AlignedBuffer<std::byte, 4096>;  // O_DIRECT reads need 4 KiB-aligned buffers

  std::vector<Bytes> slots;
  Bytes word_rows;
  std::vector<float> hidden;
  EncoderWorkspace workspace;
  Arena arena;

  // `count` slots of at least `bytes` each (kept slots only grow).
  void reserve_slots(std::size_t count, std::size_t bytes) {
    slots.resize(count);
    for (Bytes& s : slots) {
      if (s.size() < bytes) s.resize(bytes);
    }
  }

  std::size_t bytes() const {
    std::size_t total = word_rows.size() + hidden.capacity() * sizeof(float) + arena.capacity_bytes() +
                        (workspace.qkv.size() + workspace.ctx.size() + workspace.ffn.size()) * sizeof(float);
    for (const Bytes& s : slots) total += s.size();
    return total;
  }

  void release() {
    slots.clear();
    slots.shrink_to_fit();
    word_rows = Bytes();
    std::vector<float>().swap(hidden);
    workspace = EncoderWorkspace();
    arena = Arena();
  }
};

}  // namespace stile
