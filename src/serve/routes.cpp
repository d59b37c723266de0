#include "serve/routes.h"

#include "util/error.h"

namespace kvsieve {

extern const char kOpenApiDocument[];  // build/generated/openapi_document.cpp (cmake/embed_text.cmake)
extern const unsigned long kOpenApiDocumentSize;

const std::vector<Route>& server_routes() {
    static const std::vector<Route> routes = {
        {"GET", "/health"},
        {"GET", "/ready"},
        {"GET", "/metrics"},
        {"GET", "/openapi.json"},
        {"GET", "/v1/models"},
        {"POST", "/v1/completions"},
        {"POST", "/completions"},
        {"POST", "/v1/chat/completions"},
        {"POST", "/chat/completions"},
        {"POST", "/v1/cache/save"},
        {"POST", "/v1/cache/restore"},
        {"GET", "/v1/cache/conversations"},
        {"DELETE", "/v1/cache/conversations/{id}"},
        {"DELETE", "/v1/cache/saved/{name}"},
    };
    return routes;
}

const Route& find_route(const std::string& method, const std::string& path) {
    for (const Route& r : server_routes())
        if (method == r.method && path == r.path) return r;
    fail("the route ", method, " ", path,
         " is not in the server's route table (serve/routes.cpp) and docs/openapi.json");
}

namespace {
/// Whether `path` matches `tmpl`, each {name} of which stands for one non-empty segment without '/'.
bool matches(const std::string& tmpl, const std::string& path) {
    size_t t = 0, p = 0;
    while (t < tmpl.size()) {
        if (tmpl[t] == '{') {
            const size_t close = tmpl.find('}', t);
            if (close == std::string::npos) return false;
            const size_t start = p;
            while (p < path.size() && path[p] != '/') ++p;
            if (p == start) return false;
            t = close + 1;
        } else {
            if (p >= path.size() || path[p] != tmpl[t]) return false;
            ++t;
            ++p;
        }
    }
    return p == path.size();
}
}  // namespace

std::string match_route_path(const std::string& path) {
    for (const Route& r : server_routes())
        if (matches(r.path, path)) return r.path;
    return "";
}

std::string_view openapi_document() { return std::string_view(kOpenApiDocument, kOpenApiDocumentSize); }

}  // namespace kvsieve
