// CTest label: server (tests/test_labels.h)
// docs/openapi.json against the server: the document served is the committed one, it describes exactly the routes of
// the server's table (serve/routes.h), and every numeric range it states is the one parse_api_request enforces.
#include <gtest/gtest.h>

#include <cctype>
#include <climits>
#include <cstdint>
#include <fstream>
#include <iterator>
#include <string>

#include "io/gguf.h"
#include "serve/metrics.h"
#include "serve/openai_api.h"
#include "serve/routes.h"
#include "test_util.h"
#include "text/chat_template.h"
#include "text/tokenizer.h"
#include "util/error.h"

namespace kvsieve {
namespace {

using json = nlohmann::json;

json committed_document() {
    std::ifstream f(std::string(KVSIEVE_SOURCE_DIR) + "/docs/openapi.json", std::ios::binary);
    EXPECT_TRUE(f.good()) << "docs/openapi.json is missing";
    return json::parse(std::string((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>()));
}

std::string lower(std::string s) {
    for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    return s;
}

TEST(OpenApi, TheEmbeddedDocumentIsTheCommittedOne) {
    std::ifstream f(std::string(KVSIEVE_SOURCE_DIR) + "/docs/openapi.json", std::ios::binary);
    const std::string committed((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
    ASSERT_FALSE(committed.empty());
    EXPECT_EQ(std::string(openapi_document()), committed);
    const json doc = json::parse(openapi_document());
    EXPECT_EQ(doc["openapi"], "3.1.0");
    EXPECT_EQ(doc["components"]["securitySchemes"]["bearerAuth"]["scheme"], "bearer");
}

TEST(OpenApi, TheDocumentDescribesExactlyTheRoutesOfTheTable) {
    const json doc = committed_document();
    size_t operations = 0;
    for (const Route& r : server_routes()) {
        ASSERT_TRUE(doc["paths"].contains(r.path)) << r.path << " is not in docs/openapi.json";
        const json& item = doc["paths"][r.path];
        ASSERT_TRUE(item.contains(lower(r.method))) << r.method << " " << r.path << " is not in docs/openapi.json";
        const json& op = item[lower(r.method)];
        EXPECT_TRUE(op.contains("operationId")) << r.path;
        ASSERT_TRUE(op["responses"].contains("200")) << r.path;
        // Every status but 200 answers with the error object (GET /health and /ready: their own 503 body).
        for (const auto& [status, resp] : op["responses"].items()) {
            if (status == "200" || (status == "503" && resp.contains("content"))) continue;
            const json& use = resp.contains("$ref")
                                  ? doc["components"]["responses"][resp["$ref"].get<std::string>().substr(23)]
                                  : resp;
            EXPECT_EQ(use["content"]["application/json"]["schema"]["$ref"], "#/components/schemas/Error")
                << r.path << " " << status;
        }
    }
    for (const auto& [path, item] : doc["paths"].items())
        for (const auto& [method, op] : item.items()) {
            EXPECT_NO_THROW(find_route(std::string(method == "get"    ? "GET"
                                                   : method == "post" ? "POST"
                                                                      : "DELETE"),
                                       path))
                << method << " " << path << " is documented but the server has no such route";
            ++operations;
        }
    EXPECT_EQ(operations, server_routes().size());
    // The generation routes answer JSON or, streamed, server-sent events.
    for (const char* p : {"/v1/completions", "/completions", "/v1/chat/completions", "/chat/completions"}) {
        const json& ok = doc["paths"][p]["post"]["responses"]["200"]["content"];
        EXPECT_TRUE(ok.contains("application/json")) << p;
        EXPECT_TRUE(ok.contains("text/event-stream")) << p;
    }
}

TEST(OpenApi, RoutesAndMetricLabelsComeFromTheTable) {
    EXPECT_THROW(find_route("GET", "/v1/nope"), Error);
    EXPECT_THROW(find_route("POST", "/health"), Error);
    EXPECT_STREQ(find_route("DELETE", "/v1/cache/conversations/{id}").path, "/v1/cache/conversations/{id}");
    for (const Route& r : server_routes()) {
        if (std::string(r.path).find('{') != std::string::npos) continue;
        EXPECT_EQ(route_label(r.path), r.path);
    }
    EXPECT_EQ(route_label("/openapi.json"), "/openapi.json");
    EXPECT_EQ(route_label("/v1/cache/conversations/x"), "/v1/cache/conversations/{id}");
    EXPECT_EQ(route_label("/openapi.jsonx"), "other");
}

const Tokenizer& tokenizer() {
    static const GGUFFile file(test::model_path("tiny-llama-f32.gguf"));
    static const auto tok = Tokenizer::from_gguf(file);
    return *tok;
}

/// Whether parse_api_request takes a completion request with `field` set to `value` (400 otherwise).
bool accepted(bool chat, const std::string& field, const json& value) {
    static const ChatTemplate chatml = chat_template_by_name("chatml");
    ApiContext ctx;
    ctx.tok = &tokenizer();
    ctx.chat_template = &chatml;
    ctx.model_id = "tiny";
    ctx.n_ctx = 256;
    json body =
        chat ? json{{"messages", json::array({{{"role", "user"}, {"content", "Hi"}}})}} : json{{"prompt", "Hi"}};
    body[field] = value;
    try {
        parse_api_request(body, chat, ctx);
        return true;
    } catch (const ApiError& e) {
        EXPECT_EQ(e.status(), 400) << e.what();
        return false;
    }
}

/// The numeric bounds the document states for the generation requests are where the server starts refusing: each
/// bound itself is taken (refused when exclusive), one step beyond it is refused.
TEST(OpenApi, DocumentedRangesAreTheServersRanges) {
    const json doc = committed_document();
    int checked = 0;
    for (bool chat : {false, true}) {
        const json& props =
            doc["components"]["schemas"][chat ? "ChatCompletionRequest" : "CompletionRequest"]["properties"];
        for (const auto& [field, schema] : props.items()) {
            const json type = schema.value("type", json());
            const bool integer = type == "integer" || (type.is_array() && type[0] == "integer");
            const bool number = type == "number" || (type.is_array() && type[0] == "number");
            if (!integer && !number) continue;
            if (schema.contains("maximum")) {
                EXPECT_TRUE(accepted(chat, field, schema["maximum"])) << field;
                const json beyond =
                    integer ? (schema["maximum"].is_number_unsigned() && schema["maximum"].get<uint64_t>() == UINT64_MAX
                                   ? json(1.8446744073709552e19 * 2)
                                   : json(schema["maximum"].get<int64_t>() + 1))
                            : json(schema["maximum"].get<double>() + 1e-6);
                EXPECT_FALSE(accepted(chat, field, beyond)) << field << " = " << beyond.dump();
                ++checked;
            }
            if (schema.contains("minimum")) {
                EXPECT_TRUE(accepted(chat, field, schema["minimum"])) << field;
                const json below = integer ? (schema["minimum"].get<int64_t>() == INT64_MIN
                                                  ? json(-1e19)
                                                  : json(schema["minimum"].get<int64_t>() - 1))
                                           : json(schema["minimum"].get<double>() - 1e-6);
                EXPECT_FALSE(accepted(chat, field, below)) << field << " = " << below.dump();
                ++checked;
            }
            if (schema.contains("exclusiveMinimum")) {
                EXPECT_FALSE(accepted(chat, field, schema["exclusiveMinimum"])) << field;
                EXPECT_TRUE(accepted(chat, field, schema["exclusiveMinimum"].get<double>() + 1e-6)) << field;
                ++checked;
            }
            if (integer) EXPECT_FALSE(accepted(chat, field, 1.5)) << field << " takes a fraction";
        }
    }
    EXPECT_GE(checked, 16);  // max_tokens, temperature, top_p, top_k, min_p, seed (both ends), per request kind
}

}  // namespace
}  // namespace kvsieve
