// The elastic engine (stile::Engine), compiled once: see include/stile/engine_impl.hpp.
#include "stile/engine_impl.hpp"
