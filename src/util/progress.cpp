#include "util/progress.h"

#include <cstdio>

namespace kvsieve {

Progress::Progress(std::string label, int64_t total, bool enabled)
    : label_(std::move(label)), total_(total), enabled_(enabled), start_(std::chrono::steady_clock::now()),
      last_(start_ - std::chrono::seconds(1)) {}

void Progress::update(int64_t done, const std::string& extra) {
    if (!enabled_) return;
    const auto now = std::chrono::steady_clock::now();
    if (done < total_ && now - last_ < std::chrono::milliseconds(200)) return;
    last_ = now;
    const double el = std::chrono::duration<double>(now - start_).count();
    const double rate = el > 0 ? (done - done0_) / el : 0;
    const double eta = rate > 0 ? (total_ - done) / rate : 0;
    const int width = 24, fill = total_ > 0 ? static_cast<int>(width * done / total_) : width;
    std::string bar(fill, '#');
    bar += std::string(width - fill, '.');
    std::fprintf(stderr, "\r%s [%s] %ld/%ld  %.2f it/s  ETA %d:%02d  %s   ", label_.c_str(), bar.c_str(),
                 static_cast<long>(done), static_cast<long>(total_), rate, static_cast<int>(eta) / 60,
                 static_cast<int>(eta) % 60, extra.c_str());
    std::fflush(stderr);
    open_ = true;
}

void Progress::finish() {
    if (enabled_ && open_) std::fprintf(stderr, "\n");
    open_ = false;
}

}  // namespace kvsieve
