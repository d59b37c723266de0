#pragma once
// A one-line progress bar with rate and ETA on stderr, for long evaluations.
#include <chrono>
#include <cstdint>
#include <string>

namespace kvsieve {

/// Prints "label [#####.....] 12/50  3.1 it/s  ETA 0:12  <extra>" to stderr, redrawn at most 5 times a second
/// (and always on the last step); silent when disabled.
class Progress {
public:
    Progress(std::string label, int64_t total, bool enabled = true);
    /// Advances to `done` items; `extra` (e.g. a running mean) is shown after the ETA.
    void update(int64_t done, const std::string& extra = "");
    /// Items finished before this run (a resumed job): shown in the count, left out of the rate and the ETA.
    void resume_from(int64_t done) { done0_ = done; }
    /// Ends the line.
    void finish();

private:
    std::string label_;
    int64_t total_;
    bool enabled_;
    std::chrono::steady_clock::time_point start_, last_;
    bool open_ = false;
    int64_t done0_ = 0;
};

}  // namespace kvsieve
