#pragma once
// The multi-device layer of a partition's mode (dist/ws_layer.hpp, dist/tiled1d_layer.hpp,
// dist/tiled2d_layer.hpp), after checking the partition against the layer and the communicator.
#include <memory>

#include "stile/dist/communicator.hpp"
#include "stile/dist/dense_layer.hpp"
#include "stile/dist/dist_layer.hpp"
#include "stile/plan/layer_partition.hpp"
#include "stile/dist/tiled1d_layer.hpp"
#include "stile/dist/tiled2d_layer.hpp"
#include "stile/dist/ws_layer.hpp"

namespace stile {

// Collective for 2D (it splits the communicator). Throws stile::Error on a partition that does not
// match the layer or the number of ranks (the same error on every rank: every rank checks the
// same partition).
inline std::unique_ptr<DistLayer> make_dist_layer(const DenseLayer& full, const Partition& p, Communicator& comm) {
  check_partition(p, static_cast<std::size_t>(comm.size()), full.heads, full.ffn, full.hidden);
  switch (p.mode) {
    case DistMode::kWs: return std::make_unique<WsLayer>(full, p, comm);
    case DistMode::k1d: return std::make_unique<Tiled1dLayer>(full, p, comm);
    case DistMode::k2d: return std::make_unique<Tiled2dLayer>(full, p, comm);
  }
  throw Error("stile: unknown distribution mode");
}

}  // namespace stile
