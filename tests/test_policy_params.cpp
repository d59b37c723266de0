// Typed preset parameters (policy/params.h): values are checked against each key's declaration before a policy is
// built, the declared defaults are what the presets build, and the README's tables are the declarations' listing.
#include <gtest/gtest.h>

#include <fstream>
#include <iterator>
#include <set>

#include <nlohmann/json.hpp>

#include "cli_runner.h"
#include "policy/catalog.h"
#include "policy/policy.h"
#include "test_util.h"
#include "util/error.h"

namespace kvsieve {
namespace {

/// The message of the Error that parsing `spec` throws, or "no error".
std::string parse_error(const std::string& spec, const PolicyParseOptions& o = {}) {
    try {
        parse_policy(spec, o);
    } catch (const Error& e) {
        return e.what();
    }
    return "no error";
}

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

TEST(PolicyParams, IntegerOverflowIsRefusedWithTheKeyTheValueAndTheRange) {
    // 2^32 − 1 became −1 as an int (a crash in the cache), 2^32 + 17 became 17, 2^63 overflows strtoll.
    for (const std::string v : {"4294967295", "4294967313", "9223372036854775808", "99999999999999999999999"}) {
        const std::string e = parse_error("streaming_llm:window=" + v);
        EXPECT_TRUE(contains(e, "policy streaming_llm: window=" + v + " is outside [1, 16777216]")) << e;
    }
    EXPECT_TRUE(contains(parse_error("h2o:budget=9223372036854775808"), "budget=9223372036854775808 is outside [1, 16777216]"));
    EXPECT_TRUE(contains(parse_error("knorm:ratio=0.5,sinks=4294967296"), "sinks=4294967296 is outside [0, 16777216]"));
    EXPECT_TRUE(contains(parse_error("quest:budget=4294967313"), "budget=4294967313 is outside [1, 16777216]"));
    // The largest size is accepted: every size fits an int, and so does s + w + k.
    EXPECT_EQ(parse_policy("streaming_llm:window=16777216").window, 16777216);
    EXPECT_TRUE(contains(parse_error("streaming_llm:window=16777217"), "outside [1, 16777216]"));
}

TEST(PolicyParams, NegativeAndMalformedIntegersAreRefused) {
    EXPECT_TRUE(contains(parse_error("streaming_llm:window=-1"), "window=-1 is outside [1, 16777216] (window must be positive)"));
    EXPECT_TRUE(contains(parse_error("streaming_llm:window=64,sinks=-4"), "sinks=-4 is outside [0, 16777216] (sinks must be ≥ 0)"));
    EXPECT_TRUE(contains(parse_error("streaming_llm:window=16777217"), "(window must be ≤ 16777216)"));
    EXPECT_TRUE(contains(parse_error("h2o:budget=-5"), "budget=-5 is outside [1, 16777216] (budget must be positive)"));
    EXPECT_TRUE(contains(parse_error("snapkv:window_size=0"), "window_size=0 is outside [1, 16777216]"));
    for (const std::string v : {"12abc", " 12", "0x10", "1e3", "1.5", "", "--1"}) {
        const std::string e = parse_error("streaming_llm:window=" + v);
        EXPECT_TRUE(contains(e, "window='" + v + "' is ")) << e;
        EXPECT_TRUE(contains(e, "(int [1, 16777216])")) << e;
    }
    EXPECT_TRUE(contains(parse_error("expected_attention:cov=2"), "cov='2' is not a flag (flag 0 or 1)"));
}

TEST(PolicyParams, NanAndInfinityAreRefused) {
    for (const std::string v : {"nan", "NaN", "inf", "-inf", "infinity", "1e999"}) {
        const std::string e = parse_error("knorm:rule=threshold,tau=" + v);
        EXPECT_TRUE(contains(e, "policy knorm: tau='" + v + "' is not a finite number (real any finite number)")) << e;
        EXPECT_TRUE(contains(parse_error("snapkv:ratio=" + v), "ratio='" + v + "' is not a finite number (ratio [0, 1))"));
    }
    EXPECT_TRUE(contains(parse_error("pyramidkv:beta=0.5"), "beta=0.5 is outside [1, inf)"));
    EXPECT_TRUE(contains(parse_error("knorm:safeguard=1.5,rule=layer"), "safeguard=1.5 is outside [0, 1]"));
    EXPECT_TRUE(contains(parse_error("spkv:tau=2"), "tau=2 is outside [0, 1]"));
}

TEST(PolicyParams, UnknownKeyListsTheValidKeys) {
    const std::string e = parse_error("snapkv:ratio=0.5,foo=1");
    EXPECT_TRUE(contains(e, "policy snapkv: unknown key 'foo' (valid keys: budget, every, kernel, ratio, rule, safeguard, "
                            "sinks, tau, timing, window, window_size)"))
        << e;
    EXPECT_TRUE(contains(parse_error("quest:budget=64,pages=16"),
                         "policy quest: unknown key 'pages' (valid keys: budget, group, page, skip_layers)"));
    EXPECT_TRUE(contains(parse_error("full:window=4"), "unknown key 'window' (valid keys: sinks)"));
    // A declared key that does not apply to the variant the other keys choose.
    EXPECT_TRUE(contains(parse_error("knorm:ratio=0.5,tau=1"), "key 'tau' (tau=1) does not apply"));
    EXPECT_TRUE(contains(parse_error("knorm:rule=nearest"), "rule='nearest' is not head, layer, global or threshold"));
}

TEST(PolicyParams, QuestPageIsFixedAtThePoolsPageSize) {
    EXPECT_EQ(parse_policy("quest:budget=64,page=16").selection.page, 16);
    EXPECT_TRUE(contains(parse_error("quest:budget=64,page=32"), "page=32 is outside [16, 16]"));
    EXPECT_TRUE(contains(parse_error("quest:page=16"), "budget=<entries read per KV head> is required"));
}

TEST(PolicyParams, PolicyFitsChecksSinksWindowAndBudgetTogether) {
    // h2o:budget=K keeps w = K/2 recent entries and k = K − w heavy hitters, here s = 4: B = 4 + 50 + 50.
    const Policy h2o = parse_policy("h2o:budget=100,sinks=4");
    EXPECT_NO_THROW(check_policy_fits(h2o, 104));
    const std::string e = [&] {
        try {
            check_policy_fits(h2o, 103);
        } catch (const Error& x) {
            return std::string(x.what());
        }
        return std::string("no error");
    }();
    EXPECT_TRUE(contains(e, "sinks + window + budget = 4 + 50 + 50 = 104")) << e;
    EXPECT_THROW(check_policy_fits(parse_policy("streaming_llm:window=4096"), 4096), Error);  // 4 sinks + 4096
    EXPECT_NO_THROW(check_policy_fits(parse_policy("streaming_llm:window=4092"), 4096));
    EXPECT_THROW(check_policy_fits(parse_policy("full:sinks=5000"), 4096), Error);
    EXPECT_THROW(check_policy_fits(parse_policy("knorm:budget=5000"), 4096), Error);
}

/// Specs that build each variant of a preset with its required keys only; none for presets whose every literal
/// default needs gates from a file the tests make elsewhere (wgkv: tests/test_wgkv.cpp).
std::vector<std::string> base_specs(const std::string& preset) {
    const std::string kvzap = "kvzap:model=" + std::string(KVSIEVE_SOURCE_DIR) + "/models/kvzap/stories260K-linear";
    if (preset == "streaming_llm") return {"streaming_llm:window=64"};
    if (preset == "hybrid_heads") return {"hybrid_heads:global=0.1"};
    if (preset == "kvzap") return {kvzap, kvzap + ",rule=head"};
    if (preset == "kvpop" || preset == "kvpop_mlp" || preset == "wgkv") return {};
    return {preset};
}

/// Everything a spec builds that a key can change, as text.
std::string built(const Policy& p) {
    return p.describe() + "|gated=" + std::to_string(p.gated_prefill) + "|key=" + p.after_prefill_key +
           "|safeguard=" + std::to_string(p.compression.safeguard) + "|beta=" + std::to_string(p.compression.pyramid_beta) +
           "|pw=" + std::to_string(p.compression.pyramid_window) + "|sel=" + p.selection.describe();
}

TEST(PolicyParams, EachPresetsDeclaredDefaultsAreWhatItBuilds) {
    int checked = 0;
    // Each literal default, given explicitly, builds what leaving it out builds, in every variant where it applies
    // (and it applies in at least one).
    for (const auto& [name, info] : presets()) {
        const auto bases = base_specs(name);
        if (bases.empty()) continue;
        for (const ParamDecl& d : info.params) {
            if (d.default_value.empty()) continue;
            int applies = 0;
            for (const std::string& base : bases) {
                if (contains(base, ":" + d.key + "=") || contains(base, "," + d.key + "=")) continue;
                const std::string spec = base + (base.find(':') == std::string::npos ? ":" : ",") + d.key + "=" + d.default_value;
                const std::string err = parse_error(spec);
                if (contains(err, "does not apply")) continue;
                ASSERT_EQ(err, "no error") << spec;
                EXPECT_EQ(built(parse_policy(spec)), built(parse_policy(base))) << spec;
                ++applies;
            }
            EXPECT_GE(applies, 1) << name << ": the default of " << d.key << " applies to no variant";
            ++checked;
        }
    }
    for (const std::string& key : {"page=16", "skip_layers=2", "group=sum"})
        EXPECT_EQ(built(parse_policy("quest:budget=64," + key)), built(parse_policy("quest:budget=64"))) << key;
    EXPECT_GE(checked, 40);
    // The defaults the presets had before their keys were declared (an independent record).
    auto def = [](const std::string& preset, const std::string& key) {
        for (const ParamDecl& d : presets().at(preset).params)
            if (d.key == key) return d.default_text();
        return std::string("undeclared");
    };
    EXPECT_EQ(def("streaming_llm", "sinks"), "4");
    EXPECT_EQ(def("snapkv", "ratio"), "0.5");
    EXPECT_EQ(def("snapkv", "window_size"), "64");
    EXPECT_EQ(def("snapkv", "kernel"), "5");
    EXPECT_EQ(def("pyramidkv", "beta"), "20");
    EXPECT_EQ(def("knorm", "safeguard"), "0.2");
    EXPECT_EQ(def("expected_attention", "n_future"), "512");
    EXPECT_EQ(def("expected_attention", "epsilon"), "0");
    EXPECT_EQ(def("adakv_expected_attention_e2", "epsilon"), "0.01");
    EXPECT_EQ(def("adakv_expected_attention_e2", "rule"), "layer");
    EXPECT_EQ(def("kvzip", "rule"), "global");
    EXPECT_EQ(def("kvzip", "sinks"), "4");
    EXPECT_EQ(def("kvzip_plus", "chunk"), "2048");
    EXPECT_EQ(def("kvzap", "tau"), "-4");
    EXPECT_EQ(def("spkv", "tau"), "0.5");
    EXPECT_EQ(def("hybrid_heads", "window"), "128");
    // Built values (computed from the papers' defaults, not from the declarations).
    EXPECT_EQ(parse_policy("streaming_llm:window=64").sinks, 4);
    EXPECT_EQ(parse_policy("kvzip").after_prefill_key, "kvzip:chunk=2048,rows=all,score_sinks=4,sinks=0,window=0");
    EXPECT_DOUBLE_EQ(parse_policy("pyramidkv").compression.pyramid_beta, 20);
    EXPECT_EQ(parse_policy("h2o:budget=512").window, 256);
    EXPECT_EQ(parse_policy("h2o:budget=512").compression.budget, 256);
    EXPECT_EQ(parse_policy("knorm").compression.kind, Rule::Kind::kHeadBudget);
    EXPECT_EQ(parse_policy("adakv_expected_attention_e2").compression.kind, Rule::Kind::kLayerBudget);
    EXPECT_EQ(parse_policy("quest:budget=64").selection.skip_layers, 2);
}

TEST(PolicyParams, EveryKeyIsDeclaredWithTypeRangeDocAndSource) {
    for (const auto& [name, info] : presets())
        for (const ParamDecl& d : info.params) {
            EXPECT_FALSE(d.doc.empty()) << name << ":" << d.key;
            EXPECT_FALSE(d.source.empty()) << name << ":" << d.key;
            EXPECT_FALSE(d.default_text().empty()) << name << ":" << d.key;
        }
    // Sizes are bounded so that every size fits an int.
    for (const auto& [name, info] : presets())
        for (const ParamDecl& d : info.params)
            if (d.key == "window" || d.key == "sinks" || d.key == "budget") EXPECT_LE(d.imax, kMaxTokens) << name;
}

TEST(PolicyParams, ReadmeTablesAreTheDeclarations) {
    std::ifstream f(std::string(KVSIEVE_SOURCE_DIR) + "/README.md");
    const std::string readme(std::istreambuf_iterator<char>(f), {});
    const size_t b = readme.find(kPoliciesBegin), e = readme.find(kPoliciesEnd);
    ASSERT_NE(b, std::string::npos) << "README.md has no line " << kPoliciesBegin;
    ASSERT_NE(e, std::string::npos) << "README.md has no line " << kPoliciesEnd;
    const size_t start = b + std::string(kPoliciesBegin).size() + 2;  // the marker line and one blank line
    const std::string tables = readme.substr(start, e - start);
    EXPECT_EQ(tables, policies_markdown())
        << "README.md's policy tables differ from the declarations: paste `kvsieve policies --markdown` between the "
           "markers";
}

TEST(PolicyParams, PoliciesCommandListsTheDeclarations) {
    const auto md = test::run_cli("policies --markdown");
    EXPECT_EQ(md.status, 0) << md.err;
    EXPECT_EQ(md.out, policies_markdown());
    const auto js = test::run_cli("policies streaming_llm --json");
    ASSERT_EQ(js.status, 0) << js.err;
    const auto j = nlohmann::json::parse(js.out);
    ASSERT_EQ(j["presets"].size(), 1u);
    std::set<std::string> keys;
    for (const auto& p : j["presets"][0]["params"]) keys.insert(p["key"].get<std::string>());
    EXPECT_EQ(keys, (std::set<std::string>{"ratio", "sinks", "window"}));
    EXPECT_EQ(j["presets"][0]["params"][0]["default"], "4");
    const auto text = test::run_cli("policies quest");
    EXPECT_EQ(text.status, 0);
    EXPECT_TRUE(contains(text.out, "page")) << text.out;
    const auto bad = test::run_cli("policies nosuch");
    EXPECT_EQ(bad.status, 1);
    EXPECT_TRUE(contains(bad.err, "unknown policy 'nosuch'")) << bad.err;
}

}  // namespace
}  // namespace kvsieve
