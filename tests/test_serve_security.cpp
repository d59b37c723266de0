// CTest label: server (tests/test_labels.h)
// The server's defences against hostile clients, helper by helper: bounded quotes of client text, responses that
// serialise any bytes, request bodies refused before a deep parse, bounded metrics labels, keys and owners.
#include <gtest/gtest.h>

#include <sys/resource.h>

#include <csignal>

#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "serve/auth.h"
#include "serve/cache_quota.h"
#include "serve/json_body.h"
#include "serve/openai_api.h"
#include "serve/metrics.h"
#include "serve/scheduler.h"
#include "util/atomic_file.h"
#include "util/error.h"
#include "util/sha256.h"
#include "test_util.h"

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

TEST(JsonBody, ErrorBodiesAreBoundedWhateverTheyQuote) {
    const json e = error_body(400, "bad: " + std::string(100000, 'q'));
    EXPECT_LT(e["error"]["message"].get<std::string>().size(), kMaxErrorBytes + 32);
    EXPECT_EQ(error_body(404, "short")["error"]["message"], "short");
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
    EXPECT_EQ(json_nesting_depth(R"({"a": "[[[[{{{{"})"), 1u);         // brackets in a string
    EXPECT_EQ(json_nesting_depth(R"({"a": "\"[[[[", "b": []})"), 2u);  // an escaped quote does not end it
    EXPECT_EQ(json_nesting_depth(R"({"a": "\\", "b": [[1]]})"), 3u);   // an escaped backslash does
    EXPECT_EQ(json_nesting_depth(std::string(100000, '['), 64), 65u);  // stops as soon as it passes the limit
    EXPECT_EQ(json_nesting_depth(std::string(64, '[') + std::string(64, ']'), 64), 64u);
}

TEST(JsonBody, ParseRefusesDeepBodiesWithA400BeforeParsing) {
    const std::string deep =
        R"({"prompt":"Hi","temperature":)" + std::string(100000, '[') + std::string(100000, ']') + "}";
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

using test::TempDir;

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
    for (const auto& e : std::filesystem::directory_iterator(d.path()))
        files += e.path().filename() == "a.kvseq" ? 1 : 100;
    EXPECT_EQ(files, 1);
}

TEST(AtomicFile, NeverFollowsAPlantedLink) {
    TempDir d;
    const std::string victim = d.path() + "/victim";
    { std::ofstream(victim) << "precious"; }
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
    for (const auto& e : std::filesystem::directory_iterator(d.path()))
        entries += e.path().filename() == "taken.kvseq" ? 1 : 100;
    EXPECT_EQ(entries, 1);
    EXPECT_THROW(write_file_atomic(d.path() + "/missing/x.kvseq", "x"), Error);
}

/// Runs `f` with the process's file size limit (RLIMIT_FSIZE) at `bytes` and SIGXFSZ ignored, so that a write past
/// it fails with EFBIG as one past a full disk fails with ENOSPC; both are restored after.
template <class F>
void with_file_size_limit(rlim_t bytes, F f) {
    rlimit old{};
    ASSERT_EQ(getrlimit(RLIMIT_FSIZE, &old), 0);
    rlimit lim = old;
    lim.rlim_cur = bytes;
    auto* prev = std::signal(SIGXFSZ, SIG_IGN);
    ASSERT_EQ(setrlimit(RLIMIT_FSIZE, &lim), 0);
    f();
    setrlimit(RLIMIT_FSIZE, &old);
    std::signal(SIGXFSZ, prev);
}

TEST(AtomicFile, AFullStorageIsStorageFullAndLeavesNothing) {
    TempDir d;
    with_file_size_limit(4096, [&] {
        try {
            write_file_atomic(d.path() + "/big.kvseq", std::string(1 << 16, 'x'), "big.kvseq");
            FAIL() << "a write past the size limit succeeded";
        } catch (const StorageFull& e) {
            EXPECT_NE(std::string(e.what()).find("'big.kvseq'"), std::string::npos) << e.what();
        }
        write_file_atomic(d.path() + "/small.kvseq", "fits");  // under the limit: written
    });
    EXPECT_EQ(slurp(d.path() + "/small.kvseq"), "fits");
    int entries = 0;
    for ([[maybe_unused]] const auto& e : std::filesystem::directory_iterator(d.path())) ++entries;
    EXPECT_EQ(entries, 1);  // no temporary left
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
    { std::ofstream(d.path() + "/owner/.b.kvseq.xY9zzz.tmp") << "half"; }
    std::filesystem::create_symlink(victim, d.path() + "/owner/.c.kvseq.QQQQQQ.tmp");
    EXPECT_EQ(remove_stale_temporaries(d.path()), 4);
    EXPECT_EQ(slurp(victim), "precious");
    EXPECT_EQ(slurp(d.path() + "/keep.kvseq"), "saved");
    EXPECT_TRUE(std::filesystem::is_empty(d.path() + "/owner"));
    EXPECT_EQ(remove_stale_temporaries(d.path() + "/none"), 0);
}

TEST(CacheQuota, CountsTheFolderOwnSavedFilesOnlyAndFreesAReplacedOne) {
    TempDir dir;
    const std::string d = dir.path();
    auto put = [](const std::string& p, size_t n) { std::ofstream(p, std::ios::binary) << std::string(n, 'x'); };
    put(d + "/a.kvseq", 100);
    put(d + "/b.kvseq", 250);
    put(d + "/notes.txt", 1000);                        // not a saved sequence
    std::filesystem::create_directories(d + "/other");  // another owner's folder
    put(d + "/other/c.kvseq", 5000);
    std::filesystem::create_symlink(d + "/other/c.kvseq", d + "/link.kvseq");  // a link is not followed
    EXPECT_EQ(saved_sequence_bytes(d), 350u);
    EXPECT_EQ(saved_sequence_bytes(d, "b.kvseq"), 100u);
    EXPECT_EQ(saved_sequence_bytes(d + "/missing"), 0u);
    EXPECT_NO_THROW(check_cache_quota(d + "/new.kvseq", 1 << 20, 0));  // 0: no quota
    EXPECT_NO_THROW(check_cache_quota(d + "/new.kvseq", 150, 500));    // 350 + 150 = 500: just fits
    try {
        check_cache_quota(d + "/new.kvseq", 151, 500);
        ADD_FAILURE() << "a save one byte past the quota was allowed";
    } catch (const StatusError& e) {
        EXPECT_EQ(e.status(), 403);
        const std::string m = e.what();
        EXPECT_NE(m.find("151 bytes"), std::string::npos) << m;
        EXPECT_NE(m.find("350 bytes of its 500"), std::string::npos) << m;
        EXPECT_EQ(m.find(d), std::string::npos) << "the message names the server's folder: " << m;
    }
    // Saving over b.kvseq frees its 250 bytes first.
    EXPECT_NO_THROW(check_cache_quota(d + "/b.kvseq", 400, 500));
    EXPECT_THROW(check_cache_quota(d + "/b.kvseq", 401, 500), StatusError);
}

TEST(Sha256, KnownVectors) {
    EXPECT_EQ(sha256_hex(""), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
    EXPECT_EQ(sha256_hex("abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
    // Two blocks: the padding does not fit after 56 bytes.
    EXPECT_EQ(sha256_hex("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq"),
              "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
    EXPECT_EQ(sha256_hex(std::string(1000000, 'a')),
              "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
}

TEST(Auth, ConstantTimeCompare) {
    EXPECT_TRUE(constant_time_equal("", ""));
    EXPECT_TRUE(constant_time_equal("secret-key", "secret-key"));
    EXPECT_FALSE(constant_time_equal("secret-key", "secret-kez"));
    EXPECT_FALSE(constant_time_equal("secret-key", "secret-key2"));
    EXPECT_FALSE(constant_time_equal("secret", ""));
    EXPECT_FALSE(constant_time_equal(std::string("a\0", 2), "a"));
}

TEST(Auth, KeyFileParsing) {
    EXPECT_EQ(parse_key_file("# team keys\n\nalpha\n  beta \r\n\t# not a key\ngamma"),
              (std::vector<std::string>{"alpha", "beta", "gamma"}));
    EXPECT_TRUE(parse_key_file("").empty());
    EXPECT_TRUE(parse_key_file("# only\n\n").empty());
    try {
        parse_key_file("ok\ntwo words\n");
        FAIL() << "a line with a space was read as a key";
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("line 2"), std::string::npos) << e.what();
        EXPECT_EQ(std::string(e.what()).find("two words"), std::string::npos) << "the message shows the key";
    }
}

TEST(Auth, KeyRingFindsTheOwnerOfAValidBearerKeyOnly) {
    KeyRing none({}, "");
    EXPECT_FALSE(none.enabled());
    KeyRing ring({"alpha", "beta"}, "");
    EXPECT_TRUE(ring.enabled());
    EXPECT_EQ(ring.owner_of("Bearer alpha"), owner_tag("alpha"));
    EXPECT_EQ(ring.owner_of("bearer beta"), owner_tag("beta"));
    EXPECT_NE(owner_tag("alpha"), owner_tag("beta"));
    EXPECT_EQ(owner_tag("alpha").size(), 16u);
    EXPECT_EQ(owner_tag("alpha"), sha256_hex("alpha").substr(0, 16));
    EXPECT_FALSE(ring.owner_of("Bearer alph"));
    EXPECT_FALSE(ring.owner_of("Bearer alphaa"));
    EXPECT_FALSE(ring.owner_of("alpha"));
    EXPECT_FALSE(ring.owner_of("Basic alpha"));
    EXPECT_FALSE(ring.owner_of("Bearer "));
    EXPECT_FALSE(ring.owner_of(""));
    EXPECT_THROW(KeyRing({"two words"}, ""), Error);
    EXPECT_THROW(KeyRing({""}, ""), Error);
}

TEST(Auth, KeyFileReloadKeepsOwnersStableAndRevokes) {
    TempDir d;
    const std::string f = d.path() + "/keys";
    { std::ofstream(f) << "# keys\nk1\nk2\n"; }
    KeyRing ring({"cli"}, f);
    EXPECT_EQ(ring.size(), 3u);
    const auto k2 = ring.owner_of("Bearer k2");
    ASSERT_TRUE(k2);
    {
        std::ofstream(f) << "k0\nk2\n";  // k1 revoked, k0 added before k2
    }
    EXPECT_EQ(ring.reload(), 3u);
    EXPECT_FALSE(ring.owner_of("Bearer k1"));
    EXPECT_EQ(ring.owner_of("Bearer k2"), k2);  // the same owner, whatever its place in the file
    EXPECT_TRUE(ring.owner_of("Bearer k0"));
    EXPECT_TRUE(ring.owner_of("Bearer cli"));
    { std::ofstream(f) << "bad key\n"; }
    EXPECT_THROW(ring.reload(), Error);
    EXPECT_TRUE(ring.owner_of("Bearer k0"));  // a bad file keeps the keys in force
    { std::ofstream(f) << ""; }
    ring.reload();
    EXPECT_TRUE(ring.enabled());  // an emptied key file does not open the server
    EXPECT_FALSE(ring.owner_of("Bearer k0"));
    try {
        KeyRing missing({}, d.path() + "/missing");
        FAIL() << "a missing key file was accepted";
    } catch (const Error& e) { EXPECT_EQ(std::string(e.what()).find(d.path()), std::string::npos) << e.what(); }
}

TEST(Auth, HostOriginAndContentTypeChecks) {
    for (const char* h : {"127.0.0.1", "127.0.0.1:8080", "localhost", "LOCALHOST:1", "[::1]", "[::1]:65535"})
        EXPECT_TRUE(is_loopback_host_header(h)) << h;
    for (const char* h : {"", "evil.example", "evil.example:8080", "127.0.0.1.evil.example", "localhost.evil.example",
                          "127.0.0.1:", "127.0.0.1:80x", "[::1]x", "[::1", "127.0.0.2"})
        EXPECT_FALSE(is_loopback_host_header(h)) << h;
    EXPECT_TRUE(is_loopback_address("127.0.0.1"));
    EXPECT_TRUE(is_loopback_address("::1"));
    EXPECT_TRUE(is_loopback_address("localhost"));
    EXPECT_FALSE(is_loopback_address("0.0.0.0"));
    EXPECT_FALSE(is_loopback_address("192.168.1.2"));
    EXPECT_TRUE(is_json_content_type("application/json"));
    EXPECT_TRUE(is_json_content_type("Application/JSON; charset=utf-8"));
    EXPECT_FALSE(is_json_content_type(""));
    EXPECT_FALSE(is_json_content_type("text/plain"));
    EXPECT_FALSE(is_json_content_type("application/x-www-form-urlencoded"));
    EXPECT_EQ(parse_origins(" https://a.example, http://b.example:8080/ ,,"),
              (std::vector<std::string>{"https://a.example", "http://b.example:8080"}));
    EXPECT_TRUE(parse_origins("").empty());
}

TEST(Auth, ConversationIdsAndFilesAreScopedPerOwner) {
    EXPECT_EQ(scoped_id("", "chat"), "chat");
    EXPECT_EQ(scoped_id("0123456789abcdef", "chat"), "0123456789abcdef/chat");
    EXPECT_EQ(client_id("0123456789abcdef", "0123456789abcdef/chat"), "chat");
    EXPECT_FALSE(client_id("0123456789abcdef", "fedcba9876543210/chat"));
    EXPECT_EQ(client_id("", "chat"), "chat");
    EXPECT_EQ(for_client("0123456789abcdef", "no conversation '0123456789abcdef/chat' is kept"),
              "no conversation 'chat' is kept");
    ApiContext ctx;
    ctx.cache_dir = "/srv/cache";
    EXPECT_EQ(cache_path(json("s1"), "name", ctx, "0123456789abcdef"), "/srv/cache/0123456789abcdef/s1.kvseq");
    EXPECT_EQ(cache_path(json("s1"), "name", ctx), "/srv/cache/s1.kvseq");
    const CacheOpRequest op = parse_cache_op(json{{"name", "s1"}, {"slot", 0}}, false, ctx, "0123456789abcdef");
    EXPECT_EQ(op.ref.owner, "0123456789abcdef");
    const CacheOpRequest rs = parse_cache_op(json{{"name", "s1"}}, true, ctx, "0123456789abcdef");
    EXPECT_EQ(rs.ref.conversation, "0123456789abcdef/s1");
}

TEST(Metrics, HistogramsAreCumulativeWithSumAndCount) {
    Histogram h({0.1, 1});
    h.observe(0.05);
    h.observe(0.1);  // a bound is inclusive
    h.observe(0.5);
    h.observe(7);
    EXPECT_EQ(h.counts, (std::vector<int64_t>{2, 1}));
    EXPECT_EQ(h.count, 4);
    EXPECT_DOUBLE_EQ(h.sum, 7.65);
    SchedulerSnapshot s;
    s.time_to_first_token_s = h;
    s.finish_reasons["length"] = 3;
    s.queued = 2;
    const std::string t = prometheus_text(s, HttpCounters(), "m");
    EXPECT_NE(t.find("# TYPE kvsieve_time_to_first_token_seconds histogram\n"), std::string::npos) << t;
    EXPECT_NE(t.find("kvsieve_time_to_first_token_seconds_bucket{le=\"0.1\"} 2\n"), std::string::npos) << t;
    EXPECT_NE(t.find("kvsieve_time_to_first_token_seconds_bucket{le=\"1\"} 3\n"), std::string::npos) << t;
    EXPECT_NE(t.find("kvsieve_time_to_first_token_seconds_bucket{le=\"+Inf\"} 4\n"), std::string::npos) << t;
    EXPECT_NE(t.find("kvsieve_time_to_first_token_seconds_sum 7.65\n"), std::string::npos) << t;
    EXPECT_NE(t.find("kvsieve_time_to_first_token_seconds_count 4\n"), std::string::npos) << t;
    EXPECT_NE(t.find("kvsieve_request_finish_total{reason=\"length\"} 3\n"), std::string::npos) << t;
    EXPECT_NE(t.find("kvsieve_requests_waiting 2\n"), std::string::npos) << t;
    EXPECT_NE(t.find("kvsieve_inter_token_latency_seconds_count 0\n"), std::string::npos) << t;
}

}  // namespace
}  // namespace kvsieve
