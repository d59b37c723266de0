#pragma once
// A Prometheus-style histogram: observations counted in cumulative buckets, with their sum.
#include <cstdint>
#include <vector>

namespace kvsieve {

/// Counts of observations at or below each upper bound (ascending; +Inf implied), their number and sum. Not
/// thread-safe (the scheduler updates its own under its lock).
struct Histogram {
    std::vector<double> bounds;   ///< upper bounds, ascending
    std::vector<int64_t> counts;  ///< per bound: observations ≤ bound and > the previous bound (not cumulative)
    int64_t count = 0;            ///< all observations (the +Inf bucket)
    double sum = 0;

    Histogram() = default;
    explicit Histogram(std::vector<double> upper_bounds) : bounds(std::move(upper_bounds)), counts(bounds.size(), 0) {}
    void observe(double v) {
        for (size_t i = 0; i < bounds.size(); ++i)
            if (v <= bounds[i]) {
                ++counts[i];
                break;
            }
        ++count;
        sum += v;
    }
};

}  // namespace kvsieve
