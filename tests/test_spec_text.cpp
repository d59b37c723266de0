// The text of a policy spec: parts, joiners and key=value items as written, before any preset reads them.
#include <gtest/gtest.h>

#include <string>

#include "policy/policy.h"
#include "policy/spec_text.h"
#include "test_util.h"
#include "util/error.h"

namespace kvsieve {
namespace {

TEST(SpecText, PartsKeepTheirJoinersAndTheOrderOfTheirKeys) {
    const auto parts = split_policy_spec("wgkv:model=m/a,tau=0.1>snapkv:window=64,ratio=0.5+quest:read_budget=32");
    ASSERT_EQ(parts.size(), 3u);
    EXPECT_EQ(parts[0].name, "wgkv");
    EXPECT_EQ(parts[0].joiner, 0);
    EXPECT_EQ(parts[0].text, "wgkv:model=m/a,tau=0.1");
    ASSERT_EQ(parts[0].params.size(), 2u);
    EXPECT_EQ(parts[0].params[0], (std::pair<std::string, std::string>{"model", "m/a"}));
    EXPECT_EQ(parts[0].params[1], (std::pair<std::string, std::string>{"tau", "0.1"}));
    EXPECT_EQ(parts[1].name, "snapkv");
    EXPECT_EQ(parts[1].joiner, '>');
    // Written order, not sorted: window before ratio.
    EXPECT_EQ(parts[1].params[0].first, "window");
    EXPECT_EQ(parts[1].params[1].first, "ratio");
    EXPECT_EQ(parts[2].name, "quest");
    EXPECT_EQ(parts[2].joiner, '+');
    EXPECT_EQ(parts[2].text, "quest:read_budget=32");
    // Joined back, the spec reads as written; an empty item and a bare name need no colon.
    EXPECT_EQ(spec_text(parts), "wgkv:model=m/a,tau=0.1>snapkv:window=64,ratio=0.5+quest:read_budget=32");
    EXPECT_EQ(spec_text(split_policy_spec("knorm:ratio=0.5,,sinks=4")), "knorm:ratio=0.5,sinks=4");
    EXPECT_EQ(spec_text(split_policy_spec("full")), "full");
    EXPECT_TRUE(split_policy_spec("full:")[0].params.empty());
}

TEST(SpecText, MalformedItemsAreRefusedNamingThePart) {
    auto split = [](const char* spec) { return [spec] { split_policy_spec(spec); }; };
    test::expect_error_contains(split("snapkv:ratio"), "policy snapkv: 'ratio' is not key=value");
    test::expect_error_contains(split("snapkv:=0.5"), "'=0.5' is not key=value");
    test::expect_error_contains(split("full+quest:page=16,page=32"), "policy quest: key 'page' given twice");
    // The map form sorts the keys and refuses the same items.
    const auto m = parse_spec_params("knorm", "sinks=4,ratio=0.5");
    ASSERT_EQ(m.size(), 2u);
    EXPECT_EQ(m.begin()->first, "ratio");
    EXPECT_THROW(parse_spec_params("knorm", "ratio=0.5,ratio=0.6"), Error);
}

TEST(SpecText, ParsePolicyRefusesJoinersOutOfPlace) {
    auto err = [](const std::string& spec) {
        try {
            parse_policy(spec);
        } catch (const Error& e) { return std::string(e.what()); }
        return std::string();
    };
    EXPECT_NE(err("full+quest+quest").find("at most one read-time selection"), std::string::npos);
    EXPECT_NE(err("streaming_llm>streaming_llm>full").find("at most one admission"), std::string::npos);
    EXPECT_NE(err("full+quest>full").find("goes in front of the eviction"), std::string::npos);
    // A selection alone reads the full cache; its spec and name are kept.
    const Policy q = parse_policy("quest:read_budget=32");
    EXPECT_EQ(q.name, "full");
    EXPECT_EQ(q.spec, "quest:read_budget=32");
    EXPECT_EQ(q.selection.kind, "quest");
}

}  // namespace
}  // namespace kvsieve
