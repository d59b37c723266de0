#include "predict/trained_defaults.h"

#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "io/gguf.h"
#include "predict/predictor_tensors.h"
#include "util/error.h"

namespace kvsieve {

namespace {
[[noreturn]] void bad_key(const std::string& source, const std::string& key, const std::string& want,
                          const nlohmann::json& got) {
    fail("'", source, "': key '", key, "' must be ", want, ", got ", got.dump());
}

std::optional<int64_t> json_count(const nlohmann::json& j, const std::string& source, const std::string& key,
                                  int64_t min) {
    if (!j.contains(key) || j[key].is_null()) return std::nullopt;
    const nlohmann::json& v = j[key];
    if (!v.is_number_integer() || v.get<int64_t>() < min)
        bad_key(source, key, min == 0 ? "an integer ≥ 0" : "an integer ≥ " + std::to_string(min), v);
    return v.get<int64_t>();
}

std::string json_text(const nlohmann::json& j, const std::string& source, const std::string& key) {
    if (!j.contains(key) || j[key].is_null()) return "";
    if (!j[key].is_string()) bad_key(source, key, "a string", j[key]);
    return j[key].get<std::string>();
}

std::optional<int64_t> gguf_count(const GGUFFile& f, const std::string& key, int64_t min) {
    if (!f.has(key)) return std::nullopt;
    const int64_t v = f.get_int(key);  // throws naming the file and key when not an integer
    require(v >= min, f.path(), ": metadata '", key, "' must be an integer ≥ ", min, ", got ", v);
    return v;
}
}  // namespace

TrainedDefaults trained_defaults_from_json(const nlohmann::json& j, const std::string& source) {
    if (!j.is_object()) fail("'", source, "' must hold a JSON object, got ", j.type_name());
    TrainedDefaults d;
    d.source = source;
    if (j.contains("tau") && !j["tau"].is_null()) {
        if (!j["tau"].is_number()) bad_key(source, "tau", "a number", j["tau"]);
        d.tau = j["tau"].get<double>();
    }
    d.window = json_count(j, source, "window", 0);
    d.sinks = json_count(j, source, "sinks", 0);
    d.budget = json_count(j, source, "budget_k", 1);
    d.capacity = json_count(j, source, "capacity", 1);
    if (j.contains("delayed") && !j["delayed"].is_null()) {
        if (!j["delayed"].is_boolean()) bad_key(source, "delayed", "true or false", j["delayed"]);
        d.delayed = j["delayed"].get<bool>();
    }
    d.base_model = json_text(j, source, "base_model");
    d.provenance = json_text(j, source, "provenance");
    d.model_digest = json_text(j, source, "model_digest");
    return d;
}

TrainedDefaults read_trained_defaults(const GGUFFile& f, const std::string& method) {
    TrainedDefaults d;
    d.source = f.path();
    auto key = [&](const char* k) { return predictor_metadata_key(method, k); };
    if (f.has(key("tau"))) {
        const GGUFValue* v = f.find(key("tau"));
        require(v->is_float() || v->is_integer(), f.path(), ": metadata '", key("tau"), "' must be a number");
        d.tau = v->as_float();
    }
    d.window = gguf_count(f, key("window"), 0);
    d.sinks = gguf_count(f, key("sinks"), 0);
    d.budget = gguf_count(f, key("budget"), 1);
    if (f.has(key("delayed"))) d.delayed = f.get_bool(key("delayed"), true);
    d.base_model = f.get_string(key("base_model"), "");
    d.provenance = f.get_string(key("provenance"), "");
    return d;
}

TrainedDefaults read_trained_defaults(const std::string& path, const std::string& method) {
    namespace fs = std::filesystem;
    std::error_code ec;
    if (fs::is_directory(path, ec)) {
        const fs::path cfg = fs::path(path) / "config.json";
        if (!fs::exists(cfg, ec)) return {};
        std::ifstream in(cfg);
        require(in.good(), "'", cfg.string(), "' cannot be read");
        nlohmann::json j;
        try {
            j = nlohmann::json::parse(in);
        } catch (const nlohmann::json::exception& e) { fail("'", cfg.string(), "' is not JSON: ", e.what()); }
        return trained_defaults_from_json(j, cfg.string());
    }
    if (fs::path(path).extension() == ".gguf") return read_trained_defaults(GGUFFile(path), method);
    return {};
}

void write_trained_defaults(const TrainedDefaults& d, nlohmann::json& j) {
    if (d.tau) j["tau"] = *d.tau;
    if (d.window) j["window"] = *d.window;
    if (d.sinks) j["sinks"] = *d.sinks;
    if (d.budget) j["budget_k"] = *d.budget;
    if (d.delayed) j["delayed"] = *d.delayed;
    if (!d.base_model.empty()) j["base_model"] = d.base_model;
    if (!d.provenance.empty()) j["provenance"] = d.provenance;
    if (d.capacity) j["capacity"] = *d.capacity;
    if (!d.model_digest.empty()) j["model_digest"] = d.model_digest;
}

}  // namespace kvsieve
