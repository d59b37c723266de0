// The server's defences against hostile clients, helper by helper: bounded quotes of client text, responses that
// serialise any bytes, request bodies refused before a deep parse, bounded metrics labels, saved files written
// atomically without following links.
#include <gtest/gtest.h>

#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>

#include "serve/json_body.h"
#include "serve/metrics.h"
#include "serve/scheduler.h"
#include "util/atomic_file.h"
#include "util/error.h"

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

/// A fresh empty folder under the system temp folder, removed with what it holds.
class TempDir {
public:
    TempDir() {
        static int counter = 0;
        path_ = (std::filesystem::temp_directory_path() /
                 ("kvsieve_sec_" + std::to_string(::getpid()) + "_" + std::to_string(counter++)))
                    .string();
        std::filesystem::remove_all(path_);
        std::filesystem::create_directories(path_);
    }
    ~TempDir() { std::filesystem::remove_all(path_); }
    const std::string& path() const { return path_; }

private:
    std::string path_;
};

std::string slurp(const std::string& p) {
    std::ifstream f(p, std::ios::binary);
    return std::string((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
}

TEST(AtomicFile, WritesMode0600AndLeavesNoTemporary) {
    TempDir d;
    const std::string p = d.path() + "/a.kvseq";
    write_file_atomic(p, "first");
    write_file_atomic(p, "second");
    EXPECT_EQ(slurp(p), "second");
    struct stat st;
    ASSERT_EQ(::stat(p.c_str(), &st), 0);
    EXPECT_EQ(st.st_mode & 0777, 0600u);
    int files = 0;
    for (const auto& e : std::filesystem::directory_iterator(d.path())) files += e.path().filename() == "a.kvseq" ? 1 : 100;
    EXPECT_EQ(files, 1);
}

TEST(AtomicFile, NeverFollowsAPlantedLink) {
    TempDir d;
    const std::string victim = d.path() + "/victim";
    {
        std::ofstream(victim) << "precious";
    }
    // A link at the name earlier versions used for the temporary, and one at the destination itself.
    std::filesystem::create_symlink(victim, d.path() + "/a.kvseq.tmp");
    std::filesystem::create_symlink(victim, d.path() + "/b.kvseq");
    write_file_atomic(d.path() + "/a.kvseq", "new");
    write_file_atomic(d.path() + "/b.kvseq", "new");
    EXPECT_EQ(slurp(victim), "precious");
    EXPECT_EQ(slurp(d.path() + "/a.kvseq"), "new");
    EXPECT_FALSE(std::filesystem::is_symlink(d.path() + "/b.kvseq"));  // the link was replaced, not written through
    EXPECT_EQ(slurp(d.path() + "/b.kvseq"), "new");
}

TEST(AtomicFile, AFailureNamesOnlyTheShownNameAndLeavesNothing) {
    TempDir d;
    std::filesystem::create_directory(d.path() + "/taken.kvseq");  // a folder where the file should go
    try {
        write_file_atomic(d.path() + "/taken.kvseq", "x", "taken.kvseq");
        FAIL() << "renamed over a folder";
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("'taken.kvseq'"), std::string::npos) << e.what();
        EXPECT_EQ(std::string(e.what()).find(d.path()), std::string::npos) << e.what();
    }
    int entries = 0;
    for (const auto& e : std::filesystem::directory_iterator(d.path())) entries += e.path().filename() == "taken.kvseq" ? 1 : 100;
    EXPECT_EQ(entries, 1);
    EXPECT_THROW(write_file_atomic(d.path() + "/missing/x.kvseq", "x"), Error);
}

TEST(AtomicFile, StaleTemporariesAreRemovedAndLinksNotFollowed) {
    TempDir d;
    const std::string victim = d.path() + "/victim.txt";
    {
        std::ofstream(victim) << "precious";
        std::ofstream(d.path() + "/.a.kvseq.Ab12Cd.tmp") << "half";
        std::ofstream(d.path() + "/old.kvseq.tmp") << "half";
        std::ofstream(d.path() + "/keep.kvseq") << "saved";
    }
    std::filesystem::create_directory(d.path() + "/owner");
    {
        std::ofstream(d.path() + "/owner/.b.kvseq.xY9zzz.tmp") << "half";
    }
    std::filesystem::create_symlink(victim, d.path() + "/owner/.c.kvseq.QQQQQQ.tmp");
    EXPECT_EQ(remove_stale_temporaries(d.path()), 4);
    EXPECT_EQ(slurp(victim), "precious");
    EXPECT_EQ(slurp(d.path() + "/keep.kvseq"), "saved");
    EXPECT_TRUE(std::filesystem::is_empty(d.path() + "/owner"));
    EXPECT_EQ(remove_stale_temporaries(d.path() + "/none"), 0);
}

}  // namespace
}  // namespace kvsieve
