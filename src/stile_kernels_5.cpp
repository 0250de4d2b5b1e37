// Part 5 of the stile::kernels library: see include/stile/kernels/instantiate_kernels.hpp.
#define STILE_KERNELS_PART 5
#include "stile/kernels/instantiate_kernels.hpp"
