#include "text/pair_merge.h"

#include <queue>

#include "text/unicode.h"

namespace kvsieve {

namespace {
struct Symbol {
    int prev, next;
    size_t start, len;
};
struct Candidate {
    double priority;
    int left, right;
    size_t len;
    bool operator<(const Candidate& o) const {  // the queue pops the highest priority, then the leftmost
        return priority < o.priority || (priority == o.priority && left > o.left);
    }
};
}  // namespace

std::vector<std::string> merge_pairs(
    const std::string& text, const std::function<std::optional<double>(std::string_view, std::string_view)>& priority) {
    std::vector<Symbol> sym;
    for (size_t pos = 0; pos < text.size();) {
        const size_t n = std::min(utf8_len(static_cast<uint8_t>(text[pos])), text.size() - pos);
        const int idx = static_cast<int>(sym.size());
        sym.push_back({idx - 1, -1, pos, n});
        if (idx > 0) sym[idx - 1].next = idx;
        pos += n;
    }
    const std::string_view tv(text);
    std::priority_queue<Candidate> queue;
    auto try_add = [&](int l, int r) {
        if (l < 0 || r < 0) return;
        if (auto p = priority(tv.substr(sym[l].start, sym[l].len), tv.substr(sym[r].start, sym[r].len)))
            queue.push({*p, l, r, sym[l].len + sym[r].len});
    };
    for (int i = 1; i < static_cast<int>(sym.size()); ++i) try_add(i - 1, i);
    while (!queue.empty()) {
        const Candidate c = queue.top();
        queue.pop();
        Symbol& L = sym[c.left];
        Symbol& R = sym[c.right];
        if (L.len == 0 || R.len == 0 || L.len + R.len != c.len || L.next != c.right) continue;  // stale
        L.len += R.len;
        R.len = 0;
        L.next = R.next;
        if (R.next >= 0) sym[R.next].prev = c.left;
        try_add(L.prev, c.left);
        try_add(c.left, L.next);
    }
    std::vector<std::string> pieces;
    for (int i = sym.empty() ? -1 : 0; i >= 0; i = sym[i].next) pieces.emplace_back(text, sym[i].start, sym[i].len);
    return pieces;
}

}  // namespace kvsieve
