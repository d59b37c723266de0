#include "fit/kvzap_train_config.h"

#include <algorithm>
#include <filesystem>

#include <nlohmann/json.hpp>

#include "util/error.h"

namespace kvsieve {

namespace fs = std::filesystem;

const std::vector<std::string>& kvzap_train_config_keys() {
    static const std::vector<std::string> k = {
        "model", "corpus", "out",     "mlp", "epochs", "prompts", "min_tokens", "max_tokens", "tokens_per_prompt",
        "ridge", "seed",   "threads", "tau", "window", "sinks"};
    return k;
}

namespace {
std::string resolve(const std::string& base, const std::string& p) {
    if (base.empty() || fs::path(p).is_absolute()) return p;
    return (fs::path(base) / p).string();
}

[[noreturn]] void bad(const std::string& key, const std::string& want, const nlohmann::json& got) {
    fail("train kvzap: config key '", key, "' must be ", want, ", got ", got.dump());
}

int64_t count(const nlohmann::json& j, const std::string& key, int64_t fallback, int64_t min) {
    if (!j.contains(key)) return fallback;
    if (!j[key].is_number_integer() || j[key].get<int64_t>() < min)
        bad(key, "an integer ≥ " + std::to_string(min), j[key]);
    return j[key].get<int64_t>();
}

std::string text(const nlohmann::json& j, const std::string& key) {
    if (!j.contains(key)) fail("train kvzap: config needs \"", key, "\" (--", key, ")");
    if (!j[key].is_string() || j[key].get<std::string>().empty()) bad(key, "a non-empty string", j[key]);
    return j[key].get<std::string>();
}
}  // namespace

KVzapTrainConfig read_kvzap_train_config(const nlohmann::json& j, const std::string& base) {
    if (!j.is_object()) fail("train kvzap: the config must be a JSON object, got ", j.type_name());
    const auto& keys = kvzap_train_config_keys();
    for (auto it = j.begin(); it != j.end(); ++it)
        if (std::find(keys.begin(), keys.end(), it.key()) == keys.end()) {
            std::string known;
            for (const auto& k : keys) known += (known.empty() ? "" : ", ") + k;
            fail("train kvzap: unknown config key '", it.key(), "' (known: ", known, ")");
        }
    KVzapTrainConfig c;
    c.model = resolve(base, text(j, "model"));
    std::error_code ec;
    require(fs::is_regular_file(c.model, ec), "train kvzap: config key 'model': '", c.model, "' is not a file");
    c.out = resolve(base, text(j, "out"));
    if (!j.contains("corpus")) fail("train kvzap: config needs \"corpus\" (--corpus)");
    const nlohmann::json& corpus = j["corpus"];
    if (corpus.is_string()) {
        c.corpus.push_back(resolve(base, corpus.get<std::string>()));
    } else if (corpus.is_array() && !corpus.empty()) {
        for (const auto& e : corpus) {
            if (!e.is_string()) bad("corpus", "a file name or a list of them", corpus);
            c.corpus.push_back(resolve(base, e.get<std::string>()));
        }
    } else {
        bad("corpus", "a file name or a non-empty list of them", corpus);
    }
    if (j.contains("mlp")) {
        if (!j["mlp"].is_boolean()) bad("mlp", "true or false", j["mlp"]);
        c.mlp = j["mlp"].get<bool>();
    }
    c.epochs = static_cast<int>(count(j, "epochs", c.epochs, 1));
    c.threads = static_cast<int>(count(j, "threads", c.threads, 0));
    KVzapFitOptions& f = c.fit;
    f.prompts = count(j, "prompts", f.prompts, 2);
    f.min_tokens = count(j, "min_tokens", f.min_tokens, 1);
    f.max_tokens = count(j, "max_tokens", f.max_tokens, 1);
    f.tokens_per_prompt = count(j, "tokens_per_prompt", f.tokens_per_prompt, 1);
    f.seed = static_cast<uint64_t>(count(j, "seed", static_cast<int64_t>(f.seed), 0));
    if (j.contains("ridge")) {
        if (!j["ridge"].is_number() || j["ridge"].get<double>() < 0) bad("ridge", "a number ≥ 0", j["ridge"]);
        f.ridge = j["ridge"].get<double>();
    }
    if (j.contains("tau")) {
        if (!j["tau"].is_number()) bad("tau", "a number", j["tau"]);
        f.trained.tau = j["tau"].get<double>();
    }
    f.trained.window = count(j, "window", *f.trained.window, 0);
    f.trained.sinks = count(j, "sinks", *f.trained.sinks, 0);
    return c;
}

}  // namespace kvsieve
