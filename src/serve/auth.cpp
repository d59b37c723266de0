#include "serve/auth.h"

#include <algorithm>
#include <cctype>
#include <fstream>
#include <iterator>

#include "util/error.h"
#include "util/sha256.h"

namespace kvsieve {

namespace {
std::string_view trim(std::string_view s) {
    while (!s.empty() && (s.front() == ' ' || s.front() == '\t' || s.front() == '\r')) s.remove_prefix(1);
    while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\r')) s.remove_suffix(1);
    return s;
}
std::string lower(std::string_view s) {
    std::string out(s);
    for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    return out;
}
bool well_formed_key(std::string_view k) {
    return !k.empty() && std::all_of(k.begin(), k.end(), [](char c) {
        const auto u = static_cast<unsigned char>(c);
        return u > 0x20 && u != 0x7f;
    });
}
}  // namespace

bool constant_time_equal(std::string_view a, std::string_view b) {
    const size_t n = std::max(a.size(), b.size());
    unsigned diff = a.size() == b.size() ? 0u : 1u;
    for (size_t i = 0; i < n; ++i) {
        const unsigned char x = i < a.size() ? static_cast<unsigned char>(a[i]) : 0;
        const unsigned char y = i < b.size() ? static_cast<unsigned char>(b[i]) : 0;
        diff |= static_cast<unsigned>(x ^ y);
    }
    return diff == 0;
}

std::vector<std::string> parse_key_file(std::string_view text) {
    std::vector<std::string> keys;
    size_t line_no = 0;
    while (!text.empty()) {
        ++line_no;
        const size_t nl = text.find('\n');
        const std::string_view line = trim(text.substr(0, nl));
        text = nl == std::string_view::npos ? std::string_view() : text.substr(nl + 1);
        if (line.empty() || line.front() == '#') continue;
        require(well_formed_key(line), "the key file's line ", line_no,
                " is not a key (a key is one word of printable characters, without spaces)");
        keys.emplace_back(line);
    }
    return keys;
}

std::string owner_tag(std::string_view key) { return sha256_hex(key).substr(0, 16); }

std::vector<KeyRing::Key> KeyRing::digest_all(const std::vector<std::string>& keys) {
    std::vector<Key> out;
    for (const std::string& k : keys) out.push_back({sha256(k), owner_tag(k)});
    return out;
}

KeyRing::KeyRing(const std::vector<std::string>& keys, std::string file) : cli_keys_(keys), file_(std::move(file)) {
    for (const std::string& k : cli_keys_)
        require(well_formed_key(k), "--api-key: a key is one word of printable characters, without spaces");
    enabled_ = !cli_keys_.empty() || !file_.empty();
    if (file_.empty())
        keys_ = std::make_shared<const std::vector<Key>>(digest_all(cli_keys_));
    else
        reload();
}

size_t KeyRing::reload() {
    std::vector<std::string> all = cli_keys_;
    if (!file_.empty()) {
        std::ifstream f(file_, std::ios::binary);
        require(f.good(), "--api-key-file cannot be read");
        const std::string text((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
        require(!f.bad(), "--api-key-file cannot be read");
        for (std::string& k : parse_key_file(text)) all.push_back(std::move(k));
    }
    auto next = std::make_shared<const std::vector<Key>>(digest_all(all));
    std::lock_guard<std::mutex> lk(mu_);
    keys_ = std::move(next);
    return keys_->size();
}

size_t KeyRing::size() const {
    std::lock_guard<std::mutex> lk(mu_);
    return keys_->size();
}

std::optional<std::string> KeyRing::owner_of(std::string_view authorization) const {
    std::shared_ptr<const std::vector<Key>> keys;
    {
        std::lock_guard<std::mutex> lk(mu_);
        keys = keys_;
    }
    authorization = trim(authorization);
    if (authorization.size() < 7 || lower(authorization.substr(0, 7)) != "bearer ") return std::nullopt;
    const std::string_view presented = trim(authorization.substr(7));
    if (presented.empty()) return std::nullopt;
    // The digests are compared, not the keys: every comparison takes the same time whatever the key's length.
    const std::array<uint8_t, 32> d = sha256(presented);
    const std::string_view dv(reinterpret_cast<const char*>(d.data()), d.size());
    std::optional<std::string> owner;
    for (const Key& k : *keys)  // no early exit: the time does not tell which key matched
        if (constant_time_equal(dv,
                                std::string_view(reinterpret_cast<const char*>(k.digest.data()), k.digest.size())) &&
            !owner)
            owner = k.owner;
    return owner;
}

bool is_loopback_host_header(std::string_view host) {
    const std::string h = lower(trim(host));
    size_t end = 0;  // where the name ends and ":port" may begin
    if (!h.empty() && h[0] == '[') {
        end = h.find(']');
        if (end == std::string::npos) return false;
        ++end;
    } else {
        end = std::min(h.find(':'), h.size());
    }
    const std::string name = h.substr(0, end), rest = h.substr(end);
    if (!rest.empty()) {
        const std::string port = rest.substr(1);
        if (rest[0] != ':' || port.empty() || port.size() > 5 ||
            !std::all_of(port.begin(), port.end(), [](char c) { return c >= '0' && c <= '9'; }))
            return false;
    }
    return name == "127.0.0.1" || name == "localhost" || name == "[::1]";
}

bool is_loopback_address(std::string_view address) {
    const std::string a = lower(trim(address));
    return a == "localhost" || a == "::1" || a == "[::1]" || a.rfind("127.", 0) == 0;
}

bool is_json_content_type(std::string_view content_type) {
    std::string_view t = content_type.substr(0, content_type.find(';'));
    return lower(trim(t)) == "application/json";
}

std::vector<std::string> parse_origins(std::string_view list) {
    std::vector<std::string> out;
    while (!list.empty()) {
        const size_t comma = list.find(',');
        std::string_view item = trim(list.substr(0, comma));
        list = comma == std::string_view::npos ? std::string_view() : list.substr(comma + 1);
        if (!item.empty() && item.back() == '/') item.remove_suffix(1);
        if (!item.empty()) out.emplace_back(item);
    }
    return out;
}

}  // namespace kvsieve
