#include "serve/routes.h"

#include <vector>

#include "serve/http_front.h"
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
        {"POST", "/tokenize"},
        {"POST", "/detokenize"},
        {"GET", "/tokenizer_info"},
    };
    return routes;
}

const Route& find_route(const std::string& method, const std::string& path) {
    for (const Route& r : server_routes())
        if (method == r.method && path == r.path) return r;
    fail("the route ", method, " ", path,
         " is not in the server's route table (serve/routes.cpp) and docs/openapi.json");
}

std::string match_route_path(const std::string& path) {
    for (const Route& r : server_routes())
        if (std::vector<std::string> params; match_path_template(r.path, path, params)) return r.path;
    return "";
}

std::string_view openapi_document() { return std::string_view(kOpenApiDocument, kOpenApiDocumentSize); }

}  // namespace kvsieve
