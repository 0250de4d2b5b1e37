// Part 7 of the stile::compiled library: see include/stile/kernels/instantiate_kernels.hpp.
#define STILE_KERNELS_PART 7
#include "stile/kernels/instantiate_kernels.hpp"
