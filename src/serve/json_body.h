#pragma once
// Request bodies as the server reads them, and client text as its answers quote it: JSON parsed only when its
// nesting is shallow, responses serialised without throwing on bytes that are not UTF-8, and quotes of client
// text bounded in length.
#include <cstddef>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

namespace kvsieve {

/// The most bytes of client text an error message quotes (excerpt()).
constexpr size_t kMaxQuotedBytes = 200;
/// The most bytes of an error message as a whole (error_body()).
constexpr size_t kMaxErrorBytes = 1024;

/// The deepest nesting of arrays and objects a request body may have; deeper bodies are refused before parsing.
constexpr size_t kMaxJsonDepth = 64;

/// The nesting depth of the arrays and objects in `body` (0 for a scalar), counted by a scan that respects
/// strings and their escapes, stopping as soon as it passes `stop_after` (then it returns stop_after + 1). Does
/// not validate: on a malformed body it returns what the brackets outside strings give.
size_t json_nesting_depth(std::string_view body, size_t stop_after = kMaxJsonDepth);

/// Parses a request body. Throws StatusError 400 (serve/scheduler.h) for a body nested deeper than
/// kMaxJsonDepth (before parsing it) and for a body that is not JSON (the parser's message, bounded).
nlohmann::json parse_json_body(std::string_view body);

/// `text` as an error message may quote it: at most `max_bytes` bytes, cut on a UTF-8 character boundary, with
/// "… (N bytes)" appended when it was cut. Never throws for any bytes (invalid UTF-8 is kept as it is; the
/// response's serialisation replaces it, dump_json()).
std::string excerpt(std::string_view text, size_t max_bytes = kMaxQuotedBytes);

/// A client value as an error message may quote it, without walking it: a scalar as JSON (bounded by excerpt()),
/// an array or an object by its kind and size ("an array of 3 elements"). Safe for values of any depth.
std::string describe_value(const nlohmann::json& v, size_t max_bytes = kMaxQuotedBytes);

/// `v` serialised compactly, with every byte sequence that is not UTF-8 replaced by U+FFFD (never throws for
/// text; nlohmann's default dump() throws type_error 316).
std::string dump_json(const nlohmann::json& v);

}  // namespace kvsieve
