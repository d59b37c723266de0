// Typed preset parameters (policy/params.h): values are checked against each key's declaration before a policy is
// built, the declared defaults are what the presets build, and docs/policies.md's tables are the declarations' listing.
#include <gtest/gtest.h>

#include <fstream>
#include <iterator>
#include <algorithm>
#include <filesystem>
#include <map>
#include <set>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "cli_runner.h"
#include "policy/catalog.h"
#include "policy/policy.h"
#include "test_util.h"
#include "util/deprecation.h"
#include "util/error.h"

namespace kvsieve {
namespace {

/// The message of the Error that parsing `spec` throws, or "no error".
std::string parse_error(const std::string& spec, const PolicyParseOptions& o = {}) {
    try {
        parse_policy(spec, o);
    } catch (const Error& e) { return e.what(); }
    return "no error";
}

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

TEST(PolicyParams, IntegerOverflowIsRefusedWithTheKeyTheValueAndTheRange) {
    // 2^32 − 1 became −1 as an int (a crash in the cache), 2^32 + 17 became 17, 2^63 overflows strtoll.
    for (const std::string v : {"4294967295", "4294967313", "9223372036854775808", "99999999999999999999999"}) {
        const std::string e = parse_error("streaming_llm:window=" + v);
        EXPECT_TRUE(contains(e, "policy streaming_llm: window=" + v + " is outside [1, 16777216]")) << e;
    }
    EXPECT_TRUE(contains(parse_error("h2o:capacity=9223372036854775808"),
                         "capacity=9223372036854775808 is outside [1, 16777216]"));
    EXPECT_TRUE(contains(parse_error("knorm:ratio=0.5,sinks=4294967296"), "sinks=4294967296 is outside [0, 16777216]"));
    EXPECT_TRUE(
        contains(parse_error("quest:read_budget=4294967313"), "read_budget=4294967313 is outside [1, 16777216]"));
    // The largest size is accepted: every size fits an int, and so does s + w + k.
    EXPECT_EQ(parse_policy("streaming_llm:window=16777216").window, 16777216);
    EXPECT_TRUE(contains(parse_error("streaming_llm:window=16777217"), "outside [1, 16777216]"));
}

TEST(PolicyParams, NegativeAndMalformedIntegersAreRefused) {
    EXPECT_TRUE(contains(parse_error("streaming_llm:window=-1"),
                         "window=-1 is outside [1, 16777216] (window must be positive)"));
    EXPECT_TRUE(contains(parse_error("streaming_llm:window=64,sinks=-4"),
                         "sinks=-4 is outside [0, 16777216] (sinks must be ≥ 0)"));
    EXPECT_TRUE(contains(parse_error("streaming_llm:window=16777217"), "(window must be ≤ 16777216)"));
    EXPECT_TRUE(
        contains(parse_error("h2o:capacity=-5"), "capacity=-5 is outside [1, 16777216] (capacity must be positive)"));
    EXPECT_TRUE(contains(parse_error("snapkv:obs_window=0"), "obs_window=0 is outside [1, 16777216]"));
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
        EXPECT_TRUE(
            contains(parse_error("snapkv:ratio=" + v), "ratio='" + v + "' is not a finite number (ratio [0, 1))"));
    }
    EXPECT_TRUE(contains(parse_error("pyramidkv:beta=0.5"), "beta=0.5 is outside [1, inf)"));
    EXPECT_TRUE(contains(parse_error("knorm:safeguard=1.5,rule=layer"), "safeguard=1.5 is outside [0, 1]"));
    EXPECT_TRUE(contains(parse_error("spkv:tau=2"), "tau=2 is outside [0, 1]"));
}

TEST(PolicyParams, UnknownKeyListsTheValidKeys) {
    const std::string e = parse_error("snapkv:ratio=0.5,foo=1");
    EXPECT_TRUE(
        contains(e,
                 "policy snapkv: unknown key 'foo' (valid keys: budget, every, kernel, obs_window, ratio, rule, "
                 "safeguard, sinks, tau, timing, window)"))
        << e;
    EXPECT_TRUE(contains(parse_error("quest:read_budget=64,pages=16"),
                         "policy quest: unknown key 'pages' (valid keys: group, page, read_budget, skip_layers)"));
    EXPECT_TRUE(contains(parse_error("full:ratio=0.5"), "unknown key 'ratio' (valid keys: sinks, window)"));
    // A declared key that does not apply to the variant the other keys choose.
    EXPECT_TRUE(contains(parse_error("knorm:ratio=0.5,tau=1"), "key 'tau' (tau=1) does not apply"));
    EXPECT_TRUE(contains(parse_error("knorm:rule=nearest"), "rule='nearest' is not head, layer, global or threshold"));
}

TEST(PolicyParams, QuestPageIsFixedAtThePoolsPageSize) {
    EXPECT_EQ(parse_policy("quest:read_budget=64,page=16").selection.page, 16);
    EXPECT_TRUE(contains(parse_error("quest:read_budget=64,page=32"), "page=32 is outside [16, 16]"));
    EXPECT_TRUE(contains(parse_error("quest:page=16"), "read_budget=<entries read per KV head> is required"));
}

TEST(PolicyParams, PolicyFitsChecksSinksWindowAndBudgetTogether) {
    // h2o:budget=K keeps w = K/2 recent entries and k = K − w heavy hitters, here s = 4: B = 4 + 50 + 50.
    const Policy h2o = parse_policy("h2o:budget=100,sinks=4");
    EXPECT_NO_THROW(check_policy_fits(h2o, 104));
    const std::string e = [&] {
        try {
            check_policy_fits(h2o, 103);
        } catch (const Error& x) { return std::string(x.what()); }
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
    const std::string kvzap = "kvzap:model=" + test::model_path("kvzap/stories260K-linear");
    if (preset == "streaming_llm") return {"streaming_llm:window=64"};
    if (preset == "hybrid_heads") return {"hybrid_heads:global=0.1"};
    if (preset == "kvzap") return {kvzap, kvzap + ",rule=head"};
    if (preset == "kvpop" || preset == "kvpop_mlp" || preset == "wgkv") return {};
    return {preset};
}

/// Everything a spec builds that a key can change, as text.
std::string built(const Policy& p) {
    return p.describe() + "|gated=" + std::to_string(p.gated_prefill) + "|key=" + p.after_prefill_key +
           "|safeguard=" + std::to_string(p.compression.safeguard) +
           "|beta=" + std::to_string(p.compression.pyramid_beta) +
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
                const std::string spec =
                    base + (base.find(':') == std::string::npos ? ":" : ",") + d.key + "=" + d.default_value;
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
        EXPECT_EQ(built(parse_policy("quest:read_budget=64," + key)), built(parse_policy("quest:read_budget=64")))
            << key;
    EXPECT_GE(checked, 40);
    // The defaults the presets had before their keys were declared (an independent record).
    auto def = [](const std::string& preset, const std::string& key) {
        for (const ParamDecl& d : presets().at(preset).params)
            if (d.key == key) return d.default_text();
        return std::string("undeclared");
    };
    EXPECT_EQ(def("streaming_llm", "sinks"), "4");
    EXPECT_EQ(def("snapkv", "ratio"), "0.5");
    EXPECT_EQ(def("snapkv", "obs_window"), "64");
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
    EXPECT_EQ(parse_policy("h2o:capacity=512").window, 256);
    EXPECT_EQ(parse_policy("h2o:capacity=512").compression.budget, 256);
    EXPECT_EQ(parse_policy("knorm").compression.kind, Rule::Kind::kHeadBudget);
    EXPECT_EQ(parse_policy("adakv_expected_attention_e2").compression.kind, Rule::Kind::kLayerBudget);
    EXPECT_EQ(parse_policy("quest:read_budget=64").selection.skip_layers, 2);
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
            if (d.key == "window" || d.key == "sinks" || d.key == "budget" || d.key == "capacity" ||
                d.key == "read_budget")
                EXPECT_LE(d.imax, kMaxTokens) << name;
}

TEST(PolicyParams, ReadmeTablesAreTheDeclarations) {
    std::ifstream f(std::string(KVSIEVE_SOURCE_DIR) + "/docs/policies.md");
    const std::string doc(std::istreambuf_iterator<char>(f), {});
    const size_t b = doc.find(kPoliciesBegin), e = doc.find(kPoliciesEnd);
    ASSERT_NE(b, std::string::npos) << "docs/policies.md has no line " << kPoliciesBegin;
    ASSERT_NE(e, std::string::npos) << "docs/policies.md has no line " << kPoliciesEnd;
    const size_t start = b + std::string(kPoliciesBegin).size() + 2;  // the marker line and one blank line
    const std::string tables = doc.substr(start, e - start);
    EXPECT_EQ(tables, policies_markdown())
        << "docs/policies.md's policy tables differ from the declarations: paste `kvsieve policies --markdown` between "
           "the markers";
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

/// Every declaration of every preset and selection, as (owner, declaration).
std::vector<std::pair<std::string, const ParamDecl*>> all_decls() {
    std::vector<std::pair<std::string, const ParamDecl*>> out;
    for (const auto& [name, info] : presets())
        for (const ParamDecl& d : info.params) out.emplace_back(name, &d);
    for (const auto& [name, info] : selections())
        for (const ParamDecl& d : info.params) out.emplace_back(name, &d);
    return out;
}

/// A value `d` accepts other than its default (so that reading it back shows which was taken).
std::string some_value(const ParamDecl& d) {
    if (d.type == ParamType::kInt) return std::to_string(d.imin == d.imax ? d.imin : d.imin + 3);
    if (d.type == ParamType::kFlag) return "1";
    if (d.type == ParamType::kRatio) return "0.25";
    if (d.type == ParamType::kEnum) return d.choices.back();
    return "x";
}

TEST(DeprecatedAliases, TheRenamedKeysHaveTheirFormerSpellings) {
    std::map<std::string, std::string> aliases;  // "owner:key" → alias
    for (const auto& [owner, d] : all_decls())
        if (!d->deprecated_alias.empty()) aliases[owner + ":" + d->key] = d->deprecated_alias;
    EXPECT_EQ(aliases, (std::map<std::string, std::string>{
                           {"adakv_expected_attention_e2:scored_sinks", "n_sink"},
                           {"expected_attention:scored_sinks", "n_sink"},
                           {"h2o:capacity", "budget"},
                           {"kvpop:capacity", "budget"},
                           {"kvpop_mlp:capacity", "budget"},
                           {"pyramidkv:obs_window", "window_size"},
                           {"quest:read_budget", "budget"},
                           {"snapkv:obs_window", "window_size"},
                       }));
}

TEST(DeprecatedAliases, AnAliasReadsAsItsKey) {
    int checked = 0;
    for (const auto& [owner, d] : all_decls()) {
        if (d->deprecated_alias.empty()) continue;
        const std::string v = some_value(*d);
        const std::vector<ParamDecl> one{*d};  // outlives the PolicyParams that point to it
        PolicyParams by_key(owner, one, {{d->key, v}});
        PolicyParams by_alias(owner, one, {{d->deprecated_alias, v}});
        EXPECT_TRUE(by_alias.has(d->key)) << owner << ":" << d->deprecated_alias;
        EXPECT_TRUE(by_alias.given_as_alias(d->key));
        EXPECT_FALSE(by_key.given_as_alias(d->key));
        EXPECT_EQ(by_alias.get_int(d->key, -1), by_key.get_int(d->key, -1)) << owner << ":" << d->key;
        EXPECT_EQ(by_key.get_int(d->key, -1), std::stoll(v));
        ++checked;
    }
    EXPECT_EQ(checked, 8);
}

TEST(DeprecatedAliases, AnAliasBuildsTheSamePolicyAsTheNewName) {
    const std::vector<std::pair<std::string, std::string>> same{
        {"quest:budget=64", "quest:read_budget=64"},
        {"h2o:budget=512", "h2o:capacity=512"},
        {"h2o:budget=512,window=100", "h2o:capacity=512,window=100"},
        // The deprecated budget=K of h2o counts all but the sinks: capacity = K + s.
        {"h2o:budget=100,sinks=4", "h2o:capacity=104,sinks=4"},
        {"pyramidkv:ratio=0.5,window_size=8", "pyramidkv:ratio=0.5,obs_window=8"},
        {"snapkv:budget=8,sinks=2,window=4,window_size=4", "snapkv:budget=8,sinks=2,window=4,obs_window=4"},
        {"expected_attention:n_sink=2", "expected_attention:scored_sinks=2"},
        {"full+quest:budget=32,skip_layers=0", "full+quest:read_budget=32,skip_layers=0"},
    };
    const std::string kvpop = "kvpop:model=" + test::model_path("kvpop/tiny2k-mlstm");
    const std::string mlp = "kvpop_mlp:model=" + test::model_path("kvpop/tiny2k-mlp");
    auto with_kvpop = same;
    with_kvpop.push_back({kvpop + ",budget=96,window=32,sinks=4", kvpop + ",capacity=96,window=32,sinks=4"});
    with_kvpop.push_back({mlp + ",budget=300", mlp + ",capacity=300"});
    with_kvpop.push_back(
        {"kvzap:model=" + test::model_path("kvzap/stories260K-linear") + ">" + kvpop + ",budget=96,window=32",
         "kvzap:model=" + test::model_path("kvzap/stories260K-linear") + ">" + kvpop + ",capacity=96,window=32"});
    for (const auto& [old_spec, new_spec] : with_kvpop) {
        const std::string e_old = parse_error(old_spec), e_new = parse_error(new_spec);
        ASSERT_EQ(e_new, "no error") << new_spec;
        ASSERT_EQ(e_old, "no error") << old_spec;
        const Policy a = parse_policy(old_spec), b = parse_policy(new_spec);
        EXPECT_EQ(built(a), built(b)) << old_spec << " vs " << new_spec;
        EXPECT_EQ(a.sinks, b.sinks);
        EXPECT_EQ(a.window, b.window);
        EXPECT_EQ(a.compression.budget, b.compression.budget) << old_spec;
        EXPECT_EQ(a.selection.budget, b.selection.budget) << old_spec;
    }
    // The values: h2o's capacity B = s + w + k, KVpop's likewise, Quest's read budget as given.
    const Policy h = parse_policy("h2o:capacity=104,sinks=4");
    EXPECT_EQ(h.sinks + h.window + h.compression.budget, 104);
    EXPECT_EQ(parse_policy(kvpop + ",capacity=96,window=32,sinks=4").compression.budget, 96 - 32 - 4);
    EXPECT_EQ(parse_policy("quest:read_budget=48").selection.budget, 48);
    // Errors name the spelling written.
    EXPECT_TRUE(contains(parse_error("snapkv:window_size=0"), "window_size=0 is outside [1, 16777216]"));
    EXPECT_TRUE(contains(parse_error("snapkv:obs_window=0"), "obs_window=0 is outside [1, 16777216]"));
    EXPECT_TRUE(contains(parse_error("h2o:budget=-5"), "budget=-5 is outside [1, 16777216] (budget must be positive)"));
    EXPECT_TRUE(
        contains(parse_error(kvpop + ",capacity=36,window=32,sinks=4"), "capacity=36 leaves no long-range entries"));
    EXPECT_TRUE(contains(parse_error(kvpop), "capacity=B (entries per KV head, B = sinks + window + k) is required"));
}

TEST(DeprecatedAliases, BothSpellingsInOneSpecAreAnError) {
    EXPECT_TRUE(contains(parse_error("quest:budget=64,read_budget=64"),
                         "policy quest: give read_budget or its deprecated alias budget, not both"));
    EXPECT_TRUE(contains(parse_error("kvpop:model=x,budget=100,capacity=100"),
                         "policy kvpop: give capacity or its deprecated alias budget, not both"));
    EXPECT_TRUE(contains(parse_error("snapkv:window_size=8,obs_window=8"),
                         "policy snapkv: give obs_window or its deprecated alias window_size, not both"));
    EXPECT_TRUE(
        contains(parse_error("h2o:budget=8,capacity=8"), "give capacity or its deprecated alias budget, not both"));
    EXPECT_TRUE(contains(parse_error("expected_attention:n_sink=1,scored_sinks=1"),
                         "give scored_sinks or its deprecated alias n_sink, not both"));
    // h2o takes a ratio or a capacity, in either spelling.
    EXPECT_TRUE(contains(parse_error("h2o:ratio=0.5,capacity=8"), "give ratio or capacity, not both"));
    EXPECT_TRUE(contains(parse_error("h2o:ratio=0.5,budget=8"), "give ratio or capacity, not both"));
}

TEST(DeprecatedAliases, TheWarningIsPrintedOncePerProcess) {
    reset_deprecation_warnings();
    testing::internal::CaptureStderr();
    (void)parse_policy("quest:budget=64");
    (void)parse_policy("full+quest:budget=32");
    (void)parse_policy("quest:read_budget=64");  // the new name warns nothing
    const std::string err = testing::internal::GetCapturedStderr();
    const std::string line = "warning: policy key quest:budget is deprecated, use quest:read_budget";
    const size_t first = err.find(line);
    ASSERT_NE(first, std::string::npos) << err;
    EXPECT_EQ(err.find(line, first + 1), std::string::npos) << err;
    EXPECT_EQ(std::count(err.begin(), err.end(), '\n'), 1) << err;
    EXPECT_EQ(deprecation_warnings_printed("policy key quest:budget"), 1);
    // Another alias has its own line, once.
    testing::internal::CaptureStderr();
    (void)parse_policy("snapkv:window_size=8");
    (void)parse_policy("snapkv:window_size=16");
    const std::string err2 = testing::internal::GetCapturedStderr();
    EXPECT_EQ(std::count(err2.begin(), err2.end(), '\n'), 1) << err2;
    EXPECT_TRUE(contains(err2, "warning: policy key snapkv:window_size is deprecated, use snapkv:obs_window")) << err2;
}

TEST(DeprecatedAliases, PoliciesListsTheAliases) {
    EXPECT_TRUE(contains(policies_markdown("kvpop"), "| `capacity` (deprecated alias `budget`) |"));
    EXPECT_TRUE(contains(policies_text("quest"), "deprecated alias budget"));
    const auto j = nlohmann::json::parse(policies_json("snapkv"));
    bool found = false;
    for (const auto& p : j["presets"][0]["params"])
        if (p["key"] == "obs_window") found = p["deprecated_alias"] == "window_size";
    EXPECT_TRUE(found);
}

TEST(DeprecatedAliases, PoolFlagAndItsFormerSpellingGiveTheSamePool) {
    const std::string base = "generate -m " + test::model_path("stories260K.gguf") +
                             " -p hi -n 4 "
                             "--temp 0 --ids -q -t 1 ";
    // 0.0001 MiB = 104 bytes, less than one page: the error names the pool's size in bytes, whichever flag set it.
    const auto small_new = test::run_cli(base + "--kv-pool-mb 0.0001");
    const auto small_old = test::run_cli(base + "--kv-budget-mb 0.0001");
    EXPECT_EQ(small_new.status, 1);
    EXPECT_EQ(small_old.status, 1);
    EXPECT_TRUE(contains(small_new.err, "KV pool of 104 bytes (--kv-pool-mb) is smaller than one page"))
        << small_new.err;
    EXPECT_TRUE(contains(small_old.err, "KV pool of 104 bytes (--kv-pool-mb) is smaller than one page"))
        << small_old.err;
    EXPECT_TRUE(contains(small_old.err, "warning: --kv-budget-mb is deprecated, use --kv-pool-mb")) << small_old.err;
    EXPECT_FALSE(contains(small_new.err, "deprecated")) << small_new.err;
    const auto ok_new = test::run_cli(base + "--kv-pool-mb 1");
    const auto ok_old = test::run_cli(base + "--kv-budget-mb 1");
    ASSERT_EQ(ok_new.status, 0) << ok_new.err;
    ASSERT_EQ(ok_old.status, 0) << ok_old.err;
    EXPECT_EQ(ok_new.out, ok_old.out);
    const auto both = test::run_cli(base + "--kv-pool-mb 1 --kv-budget-mb 1");
    EXPECT_NE(both.status, 0);
    EXPECT_TRUE(contains(both.err, "excludes")) << both.err;
}

TEST(DeprecatedAliases, EveryRecordedResultsPolicyStillParses) {
    // docs/results/**/config.yaml keep the spelling they ran with (budget= of kvpop, quest and h2o, window_size=, …).
    namespace fs = std::filesystem;
    const std::string root = std::string(KVSIEVE_SOURCE_DIR);
    int parsed = 0, renamed = 0, missing_model = 0;
    for (const auto& e : fs::recursive_directory_iterator(root + "/docs/results")) {
        if (e.path().filename() != "config.yaml") continue;
        std::ifstream f(e.path());
        for (std::string line; std::getline(f, line);) {
            if (line.rfind("policy: \"", 0) != 0) continue;
            std::string spec = line.substr(9, line.size() - 10);
            // A recorded predictor path is relative to the repository root of its run; those the tests read have since
            // moved into tests/data, whose copy (test::data_dir()) mirrors the root's layout below it.
            for (size_t at = spec.find("model="); at != std::string::npos; at = spec.find("model=", at + 1)) {
                const size_t from = at + 6, end = spec.find_first_of(",>;@", from);
                const std::string rel = spec.substr(from, end == std::string::npos ? std::string::npos : end - from);
                if (rel.empty() || rel[0] == '/') continue;
                const std::string bundled = test::data_dir() + "/" + rel;
                const bool moved = !fs::exists(root + "/" + rel) && fs::exists(bundled);
                spec.replace(from, rel.size(), moved ? bundled : root + "/" + rel);
            }
            const std::string err = parse_error(spec);
            if (contains(err, "cannot open") || contains(err, "No such file") || contains(err, "does not exist")) {
                ++missing_model;  // a predictor the repository does not bundle
                continue;
            }
            EXPECT_EQ(err, "no error") << e.path() << ": " << spec;
            if (contains(spec, "quest:budget=") || contains(spec, "h2o:budget=") || contains(spec, "window_size=") ||
                contains(spec, "n_sink=") || (contains(spec, "kvpop") && contains(spec, ",budget=")))
                ++renamed;  // a deprecated spelling
            ++parsed;
        }
    }
    EXPECT_GT(parsed, 400);
    EXPECT_GT(renamed, 10);
    EXPECT_LT(missing_model, parsed);
}

TEST(Glossary, ListsEveryDeclaredKey) {
    std::ifstream f(std::string(KVSIEVE_SOURCE_DIR) + "/docs/glossary.md");
    ASSERT_TRUE(f.good()) << "docs/glossary.md is missing";
    const std::string glossary(std::istreambuf_iterator<char>(f), {});
    int checked = 0;
    for (const auto& [owner, d] : all_decls()) {
        EXPECT_TRUE(contains(glossary, "`" + d->key + "`"))
            << "docs/glossary.md does not list key '" << d->key << "' of " << owner;
        if (!d->deprecated_alias.empty())
            EXPECT_TRUE(contains(glossary, "`" + d->deprecated_alias))
                << "docs/glossary.md does not list the deprecated alias '" << d->deprecated_alias << "' of " << owner;
        ++checked;
    }
    EXPECT_GT(checked, 50);
    // The pool flag and its former spelling.
    EXPECT_TRUE(contains(glossary, "`--kv-pool-mb"));
    EXPECT_TRUE(contains(glossary, "`--kv-budget-mb`"));
}

}  // namespace
}  // namespace kvsieve
