#pragma once
// The learned predictors a server offers by name. Its operator registers them at start (`kvsieve serve --predictor
// NAME=PATH`, `--predictor-dir DIR`); each is loaded once and checked against the served model, and a request's
// kv_policy may then say `kvzap:model=NAME` but never name a file: the resolver of parse_options() refuses paths and
// unknown names with an error that lists the registered names and says nothing about the file system.
#include <map>
#include <string>
#include <vector>

#include "io/model_config.h"
#include "policy/policy.h"

namespace kvsieve {

/// True for a predictor name: a safe name (util/names.h: 1 to 64 characters of [A-Za-z0-9_.-], not starting with
/// '.'), the rule conversation and saved-sequence names follow too.
bool is_predictor_name(const std::string& s);

/// Predictors by name, for one served model.
class NamedPredictors {
public:
    /// Registers `path` (a predictor directory or .safetensors file) as `name`. Throws Error for a name that is not
    /// is_predictor_name, a name given twice, or a path that does not exist.
    void add(const std::string& name, const std::string& path);
    /// Registers every subfolder of `dir` under its own name (folders whose names start with '.' are skipped). Throws
    /// Error when `dir` is not a directory or a subfolder's name is not a predictor name.
    void add_dir(const std::string& dir);
    /// Parses "NAME=PATH" (the --predictor option) and adds it. Throws Error for text without '='.
    void add_assignment(const std::string& name_eq_path);

    /// Finds each predictor's method from its files (config.json's model_type, a method of predict/learned_methods.h;
    /// the method taking bare weights, WG-KV, for a .safetensors file or a folder without config.json), loads it
    /// through the artifact
    /// registry (predict/predictor_registry.h) and checks it against the model's shapes. Throws Error naming the
    /// predictor, its path and the problem (for the operator at start).
    void validate(const ModelConfig& c);

    /// The preset name → path resolution of a request: `value` must be a registered name whose method is `preset`.
    /// Throws Error naming the value only when it is a valid name, and listing the registered names; never a path.
    std::string resolve(const std::string& preset, const std::string& value) const;
    /// Parse options whose resolver is resolve() on a copy of the current registrations.
    PolicyParseOptions parse_options() const;

    /// "a (kvzap), b (kvpop)" or "none".
    std::string names_text() const;
    std::vector<std::string> names() const;
    bool empty() const { return by_name_.empty(); }

private:
    struct Entry {
        std::string path;
        std::string preset;  ///< the method it serves, set by validate()
    };
    std::map<std::string, Entry> by_name_;
};

}  // namespace kvsieve
