// The server's defences against hostile clients, helper by helper: bounded quotes of client text, responses that
// serialise any bytes, request bodies refused before a deep parse, bounded metrics labels.
#include <gtest/gtest.h>

#include <string>

#include "serve/json_body.h"
#include "serve/metrics.h"
#include "serve/scheduler.h"

namespace kvsieve {
namespace {

using json = nlohmann::json;

TEST(JsonBody, ExcerptBoundsClientTextOnACharacterBoundary) {
    EXPECT_EQ(excerpt("short"), "short");
    const std::string long_ascii(1000, 'a');
    const std::string e = excerpt(long_ascii);
    EXPECT_EQ(e.substr(0, kMaxQuotedBytes), std::string(kMaxQuotedBytes, 'a'));
    EXPECT_NE(e.find("(1000 bytes)"), std::string::npos);
    EXPECT_LT(e.size(), kMaxQuotedBytes + 32);
    // "é" is two bytes: a cut after 3 bytes of "aéé" must not keep half of the second one.
    EXPECT_EQ(excerpt("a\xC3\xA9\xC3\xA9", 4).substr(0, 3), "a\xC3\xA9");
    EXPECT_EQ(excerpt("a\xC3\xA9\xC3\xA9", 4).substr(3, 3), "\xE2\x80\xA6");  // "…" follows at once
}

TEST(JsonBody, DumpReplacesBytesThatAreNotUtf8InsteadOfThrowing) {
    const json j = {{"message", std::string("no endpoint GET /\xFF")}};
    EXPECT_THROW((void)j.dump(), json::type_error);  // what the server did before
    const std::string s = dump_json(j);
    EXPECT_EQ(s, "{\"message\":\"no endpoint GET /\xEF\xBF\xBD\"}");
}

TEST(JsonBody, DescribeValueNeverWalksAStructuredValue) {
    EXPECT_EQ(describe_value(json(3)), "3");
    EXPECT_EQ(describe_value(json("x")), "\"x\"");
    EXPECT_EQ(describe_value(json::array({1, 2, 3})), "an array of 3 elements");
    EXPECT_EQ(describe_value(json::object({{"a", 1}})), "an object of 1 field");
    EXPECT_LT(describe_value(json(std::string(5000, 'z'))).size(), kMaxQuotedBytes + 32);
}

TEST(JsonBody, NestingDepthCountsBracketsOutsideStrings) {
    EXPECT_EQ(json_nesting_depth("3"), 0u);
    EXPECT_EQ(json_nesting_depth("{}"), 1u);
    EXPECT_EQ(json_nesting_depth(R"({"a": [1, {"b": [[]]}]})"), 5u);
    EXPECT_EQ(json_nesting_depth(R"({"a": "[[[[{{{{"})"), 1u);               // brackets in a string
    EXPECT_EQ(json_nesting_depth(R"({"a": "\"[[[[", "b": []})"), 2u);      // an escaped quote does not end it
    EXPECT_EQ(json_nesting_depth(R"({"a": "\\", "b": [[1]]})"), 3u);      // an escaped backslash does
    EXPECT_EQ(json_nesting_depth(std::string(100000, '['), 64), 65u);       // stops as soon as it passes the limit
    EXPECT_EQ(json_nesting_depth(std::string(64, '[') + std::string(64, ']'), 64), 64u);
}

TEST(JsonBody, ParseRefusesDeepBodiesWithA400BeforeParsing) {
    const std::string deep = R"({"prompt":"Hi","temperature":)" + std::string(100000, '[') + std::string(100000, ']') + "}";
    try {
        parse_json_body(deep);
        FAIL() << "a body 100000 levels deep was parsed";
    } catch (const StatusError& e) {
        EXPECT_EQ(e.status(), 400);
        EXPECT_NE(std::string(e.what()).find("deeper than 64"), std::string::npos) << e.what();
    }
    EXPECT_EQ(parse_json_body(std::string(64, '[') + std::string(64, ']')).size(), 1u);
    try {
        parse_json_body("{\"a\": " + std::string(5000, 'x') + "}");
        FAIL() << "invalid JSON was parsed";
    } catch (const StatusError& e) {
        EXPECT_EQ(e.status(), 400);
        EXPECT_LT(std::string(e.what()).size(), 2 * kMaxQuotedBytes + 64);
    }
}

TEST(Metrics, EndpointLabelsAreRouteTemplatesOrOther) {
    EXPECT_EQ(route_label("/v1/completions"), "/v1/completions");
    EXPECT_EQ(route_label("/health"), "/health");
    EXPECT_EQ(route_label("/v1/cache/conversations"), "/v1/cache/conversations");
    EXPECT_EQ(route_label("/v1/cache/conversations/abc"), "/v1/cache/conversations/{id}");
    EXPECT_EQ(route_label("/v1/cache/conversations/a/b"), "other");
    EXPECT_EQ(route_label("/v1/cache/conversations/"), "other");
    EXPECT_EQ(route_label("/nope-123"), "other");
    EXPECT_EQ(route_label(std::string("/\xFF")), "other");
    HttpCounters http;
    for (int i = 0; i < 1000; ++i) http.count(route_label("/missing/" + std::to_string(i)), 404);
    for (int i = 0; i < 1000; ++i) http.count(route_label("/v1/cache/conversations/c" + std::to_string(i)), 404);
    const auto snap = http.snapshot();
    EXPECT_EQ(snap.size(), 2u);
    EXPECT_EQ((snap.at({"other", 404})), 1000);
}

}  // namespace
}  // namespace kvsieve
