#include "serve/json_body.h"

#include "serve/scheduler.h"

namespace kvsieve {

using json = nlohmann::json;

std::string excerpt(std::string_view text, size_t max_bytes) {
    if (text.size() <= max_bytes) return std::string(text);
    size_t cut = max_bytes;
    // Back up over continuation bytes (10xxxxxx) so that no character is split (at most 3 of them).
    for (int i = 0; i < 3 && cut > 0 && (static_cast<unsigned char>(text[cut]) & 0xC0) == 0x80; ++i) --cut;
    return std::string(text.substr(0, cut)) + "… (" + std::to_string(text.size()) + " bytes)";
}

std::string describe_value(const json& v, size_t max_bytes) {
    if (v.is_array()) return "an array of " + std::to_string(v.size()) + (v.size() == 1 ? " element" : " elements");
    if (v.is_object()) return "an object of " + std::to_string(v.size()) + (v.size() == 1 ? " field" : " fields");
    return excerpt(dump_json(v), max_bytes);
}

size_t json_nesting_depth(std::string_view body, size_t stop_after) {
    size_t depth = 0, deepest = 0;
    bool in_string = false, escaped = false;
    for (char c : body) {
        if (in_string) {
            if (escaped)
                escaped = false;
            else if (c == '\\')
                escaped = true;
            else if (c == '"')
                in_string = false;
            continue;
        }
        if (c == '"') {
            in_string = true;
        } else if (c == '[' || c == '{') {
            if (++depth > deepest) {
                deepest = depth;
                if (deepest > stop_after) return stop_after + 1;
            }
        } else if ((c == ']' || c == '}') && depth > 0) {
            --depth;
        }
    }
    return deepest;
}

json parse_json_body(std::string_view body) {
    if (json_nesting_depth(body, kMaxJsonDepth) > kMaxJsonDepth)
        throw StatusError(
            400, "the request body nests arrays and objects deeper than " + std::to_string(kMaxJsonDepth) + " levels");
    try {
        return json::parse(body.begin(), body.end());
    } catch (const json::exception& e) {
        throw StatusError(400, "the request body is not valid JSON: " + excerpt(e.what()));
    }
}

std::string dump_json(const json& v) { return v.dump(-1, ' ', false, json::error_handler_t::replace); }

}  // namespace kvsieve
