// sample() descent built with -mavx2 (see sample_kernel.hpp); only called
// after the CPU reported AVX2 support at run time.
#define PEARL_KERNEL_NS avx2
#include "sample_kernel.hpp"
