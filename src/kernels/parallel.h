#pragma once
// Thread count shared by kvsieve's OpenMP loops and OpenBLAS (both use the same OpenMP runtime).

namespace kvsieve {

/// Sets the number of threads for kernels and BLAS; n ≤ 0 means all available cores.
void set_num_threads(int n);
/// Current thread count.
int num_threads();

}  // namespace kvsieve
