#pragma once
// One rank's partition (the one that solved the LP) made every rank's, so that all ranks split the
// layer the same way even if their own solves would round differently.
#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

#include "stile/dist/communicator.hpp"
#include "stile/plan/layer_partition.hpp"

namespace stile {

// Collective: on return every rank's `p` is root's.
inline void broadcast_partition(Communicator& comm, Partition& p, int root = 0) {
  std::uint64_t header[4] = {static_cast<std::uint64_t>(p.mode), p.heads.size(), p.neurons.size(), p.cols.size()};
  comm.broadcast(header, sizeof header, root);
  p.mode = static_cast<DistMode>(header[0]);
  std::vector<std::uint64_t> body(header[1] + header[2] + header[3]);
  if (comm.rank() == root) {
    std::size_t at = 0;
    for (const auto* v : {&p.heads, &p.neurons, &p.cols}) {
      for (const std::size_t x : *v) body[at++] = x;
    }
  }
  comm.broadcast(body.data(), body.size() * sizeof(std::uint64_t), root);
  std::size_t at = 0;
  for (const auto& [v, n] : {std::pair{&p.heads, header[1]}, std::pair{&p.neurons, header[2]}, std::pair{&p.cols, header[3]}}) {
    v->assign(body.begin() + static_cast<std::ptrdiff_t>(at), body.begin() + static_cast<std::ptrdiff_t>(at + n));
    at += n;
  }
}

}  // namespace stile
