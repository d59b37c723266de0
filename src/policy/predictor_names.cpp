#include "policy/predictor_names.h"

#include <filesystem>
#include <fstream>
#include <memory>

#include <nlohmann/json.hpp>

#include "predict/learned_methods.h"
#include "util/error.h"
#include "util/names.h"

namespace kvsieve {

namespace fs = std::filesystem;

bool is_predictor_name(const std::string& s) { return is_safe_name(s); }

void NamedPredictors::add(const std::string& name, const std::string& path) {
    require(is_predictor_name(name), "predictor name '", name,
            "' must be 1 to 64 characters of A-Z a-z 0-9 _ . - and not start with '.'");
    require(!by_name_.count(name), "predictor '", name, "' is registered twice");
    std::error_code ec;
    require(fs::exists(path, ec), "predictor '", name, "': '", path, "' does not exist");
    by_name_[name] = Entry{path, ""};
}

void NamedPredictors::add_dir(const std::string& dir) {
    std::error_code ec;
    require(fs::is_directory(dir, ec), "--predictor-dir '", dir, "' is not a directory");
    for (const auto& e : fs::directory_iterator(dir)) {
        const std::string name = e.path().filename().string();
        if (!e.is_directory() || name.empty() || name[0] == '.') continue;
        add(name, e.path().string());
    }
}

void NamedPredictors::add_assignment(const std::string& text) {
    const size_t eq = text.find('=');
    require(eq != std::string::npos, "--predictor '", text, "' is not NAME=PATH");
    add(text.substr(0, eq), text.substr(eq + 1));
}

namespace {
/// The preset whose `model=` a predictor at `path` fills, and the spec that builds it for a check: the method from
/// config.json's model_type (predict/learned_methods.h), or the method that takes bare weights.
std::pair<std::string, std::string> method_of(const std::string& path, const ModelConfig& c) {
    const fs::path cfg = fs::path(path) / "config.json";
    const LearnedMethod* method = nullptr;
    if (fs::is_directory(path) && fs::exists(cfg)) {
        nlohmann::json j;
        try {
            j = nlohmann::json::parse(std::ifstream(cfg));
        } catch (const nlohmann::json::exception& e) { fail("'", cfg.string(), "' is not JSON: ", e.what()); }
        const std::string type = j.is_object() ? j.value("model_type", std::string()) : std::string();
        method = find_learned_method(type);
        require(method != nullptr, "'", cfg.string(), "' has model_type '", type, "'; a predictor is a ",
                learned_method_names_text(), " checkpoint");
    } else {
        for (const LearnedMethod& m : learned_methods())
            if (m.bare_weights && !method) method = &m;  // a gates file as tools/convert_wgkv.py writes it
        require(method != nullptr, "'", path, "' is no predictor folder (no config.json)");
    }
    const std::string spec = method->spec_for_check(path, c);
    return {spec.substr(0, spec.find(':')), spec};
}
}  // namespace

void NamedPredictors::validate(const ModelConfig& c) {
    for (auto& [name, e] : by_name_) {
        try {
            const auto [preset, spec] = method_of(e.path, c);
            Policy p = parse_policy(spec);  // the operator's path, loaded through the artifact registry
            (void)p.scorer->for_model(c);   // shapes against the served model
            e.preset = preset;
        } catch (const Error& err) { fail("predictor '", name, "' ('", e.path, "'): ", err.what()); }
    }
}

std::string NamedPredictors::resolve(const std::string& preset, const std::string& value) const {
    const std::string known = "registered predictors: " + names_text();
    if (!is_predictor_name(value))
        fail("policy ", preset, ": model= takes the name of a predictor registered with the server, not a path (",
             known, ")");
    auto it = by_name_.find(value);
    if (it == by_name_.end()) fail("policy ", preset, ": no predictor named '", value, "' (", known, ")");
    if (it->second.preset != preset)
        fail("policy ", preset, ": predictor '", value, "' is a ",
             it->second.preset.empty() ? std::string("unchecked") : it->second.preset, " predictor (", known, ")");
    return it->second.path;
}

PolicyParseOptions NamedPredictors::parse_options() const {
    auto self = std::make_shared<const NamedPredictors>(*this);
    PolicyParseOptions o;
    o.resolve_model = [self](const std::string& preset, const std::string& value) {
        return self->resolve(preset, value);
    };
    return o;
}

std::vector<std::string> NamedPredictors::names() const {
    std::vector<std::string> v;
    for (const auto& [n, e] : by_name_) v.push_back(n);
    return v;
}

std::string NamedPredictors::names_text() const {
    std::string s;
    for (const auto& [n, e] : by_name_)
        s += (s.empty() ? "" : ", ") + n + (e.preset.empty() ? "" : " (" + e.preset + ")");
    return s.empty() ? "none" : s;
}

}  // namespace kvsieve
