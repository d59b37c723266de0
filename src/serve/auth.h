#pragma once
// Who a request comes from: API keys (Authorization: Bearer KEY), the owner tag each key's conversations and
// saved files are kept under, and the header checks that keep browsers on other sites out.
#include <array>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace kvsieve {

/// Whether a and b hold the same bytes, in time that depends only on their lengths (not on where they differ).
bool constant_time_equal(std::string_view a, std::string_view b);

/// The keys of a key file's text: one per line, surrounding spaces and tabs trimmed, blank lines and lines
/// starting with '#' ignored. Throws Error naming the line (by number, never the key) for a key holding a space
/// or control character.
std::vector<std::string> parse_key_file(std::string_view text);

/// The owner tag of a key: the first 16 hexadecimal characters of its SHA-256. Stable for a key whatever else the
/// key set holds; names the key's folder under --cache-dir and scopes its conversation ids.
std::string owner_tag(std::string_view key);

/// The server's keys: given on the command line and read from a file (re-read on reload()). Thread-safe: lookups
/// see either the old or the new set whole.
class KeyRing {
public:
    /// `keys` from the command line, `file` a key file ("" none). Throws Error when a key is empty or badly formed,
    /// or the file cannot be read (naming the option, not the path).
    KeyRing(const std::vector<std::string>& keys, std::string file);
    /// True when the server was started with keys (a key file that became empty still requires a key).
    bool enabled() const { return enabled_; }
    /// The owner tag of the key an Authorization header value presents ("Bearer KEY", scheme case-insensitive),
    /// or nothing when it presents none of the keys. Every key is compared, in constant time each.
    std::optional<std::string> owner_of(std::string_view authorization) const;
    /// Re-reads the key file; on an error the old keys stay and Error is thrown. Returns the number of keys.
    size_t reload();
    size_t size() const;

private:
    struct Key {
        std::array<uint8_t, 32> digest;
        std::string owner;
    };
    static std::vector<Key> digest_all(const std::vector<std::string>& keys);

    bool enabled_ = false;
    std::vector<std::string> cli_keys_;
    std::string file_;
    mutable std::mutex mu_;
    std::shared_ptr<const std::vector<Key>> keys_;
};

/// Whether a Host header value names the loopback address (127.0.0.1, localhost or [::1], with or without a
/// port): what a server bound to loopback accepts, so that a page from another site whose name resolves to
/// 127.0.0.1 (DNS rebinding) is refused.
bool is_loopback_host_header(std::string_view host);

/// Whether an address to listen on is a loopback one (127.0.0.0/8, ::1, localhost).
bool is_loopback_address(std::string_view address);

/// Whether a Content-Type header value is application/json (any parameters, any case).
bool is_json_content_type(std::string_view content_type);

/// The origins of a comma-separated list (spaces trimmed, empty items dropped, a trailing '/' dropped).
std::vector<std::string> parse_origins(std::string_view list);

}  // namespace kvsieve
