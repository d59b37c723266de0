#pragma once
// A streaming-read probe of the machine's memory bandwidth, to put decode speed in proportion.
#include <cstddef>

namespace kvsieve {

/// Reads a freshly written buffer of `bytes` (default 1 GiB, far beyond the caches) with all kernel threads
/// and returns the best of `reps` passes in GB/s (10⁹ bytes per second).
double measure_read_bandwidth_gbs(size_t bytes = size_t{1} << 30, int reps = 3);

}  // namespace kvsieve
