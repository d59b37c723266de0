#pragma once
// The server's endpoints as one table: the HTTP server registers only routes of this table, the metrics label
// requests by its paths, and docs/openapi.json (served at GET /openapi.json) describes exactly these.
#include <string>
#include <string_view>
#include <vector>

namespace kvsieve {

/// One endpoint: an HTTP method and its path as the OpenAPI document writes it ("/v1/cache/conversations/{id}":
/// a template parameter in braces stands for one non-empty path segment without '/').
struct Route {
    const char* method;  ///< "GET", "POST" or "DELETE"
    const char* path;    ///< the OpenAPI path template
};

/// Every endpoint the server may serve (GET /metrics only with HttpOptions::metrics), in registration order.
const std::vector<Route>& server_routes();

/// The route `path` of `method` is in the table as: its path template; throws Error naming them when the table
/// has no such route (a route registered without being documented is a programming error caught at start).
const Route& find_route(const std::string& method, const std::string& path);

/// The table's path template that `path` (a request's decoded path) matches, or "" when none does. Only table
/// paths come out, so that a label made from it has a bounded set of values whatever clients send.
std::string match_route_path(const std::string& path);

/// The OpenAPI 3.1 document of the server (docs/openapi.json, embedded at build time), as committed.
std::string_view openapi_document();

}  // namespace kvsieve
