#include "cli/quick_train.h"

#include <filesystem>
#include <fstream>

#include "predict/data_dirs.h"
#include "predict/learned_methods.h"
#include "util/error.h"

namespace kvsieve::cli {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {
/// `p` relative to `base` made absolute (absolute paths unchanged).
std::string absolute_from(const fs::path& base, const std::string& p) {
    const fs::path q(p);
    return (q.is_absolute() ? q : fs::absolute(base / q)).lexically_normal().string();
}

/// The string at j[key] (or each string of the list there) made absolute from `base`; other values unchanged.
void absolutize(json& j, const std::string& key, const fs::path& base) {
    if (!j.is_object() || !j.contains(key)) return;
    json& v = j[key];
    if (v.is_string()) v = absolute_from(base, v.get<std::string>());
    if (v.is_array())
        for (json& e : v)
            if (e.is_string()) e = absolute_from(base, e.get<std::string>());
}

/// The config at `path` (a JSON object) with its path keys made absolute from its folder. Throws Error naming
/// `who` and the file when it is not JSON or not an object.
json read_absolute_config(const std::string& path, const std::string& who) {
    json c;
    try {
        c = json::parse(std::ifstream(path));
    } catch (const json::exception& e) { fail(who, ": '", path, "' is not JSON: ", e.what()); }
    require(c.is_object(), who, ": '", path, "' must hold a JSON object");
    const fs::path base = fs::absolute(fs::path(path)).parent_path();
    for (const char* k : {"init", "model", "out", "output", "predictor", "corpus"}) absolutize(c, k, base);
    if (c.contains("data")) absolutize(c["data"], "text", base);
    if (c.contains("tokenizer")) absolutize(c["tokenizer"], "from_gguf", base);
    return c;
}

/// `given` made absolute, else <user>/<method>/<model stem>; Error naming `flag` when there is no user folder.
std::string method_folder(const std::string& given, const std::string& user, const LearnedMethod& method,
                          const std::string& model, const char* flag) {
    if (!given.empty()) return fs::absolute(given).lexically_normal().string();
    require(!user.empty(), "train ", method.name, ": no home folder ($HOME unset): give ", flag);
    return (fs::path(user) / method.name / fs::path(model).stem()).string();
}

std::string need_file(const std::string& p, const char* what) {
    std::error_code ec;
    require(fs::is_regular_file(p, ec), what, " '", p, "' does not exist or is not a file");
    return fs::absolute(p).lexically_normal().string();
}
}  // namespace

void add_quick_train_options(CLI::App& cmd, QuickTrainOptions& o) {
    cmd.add_option("-m,--model", o.model,
                   "the GGUF model to train a predictor for: the method's shipped config gives every other setting, "
                   "the run is resumed when the command runs again, and --policy finds the predictor for this model");
    cmd.add_option("--corpus", o.corpus, "text files to train on (with -m; default: the config's corpora)");
    cmd.add_option("--steps", o.steps, "optimiser steps (with -m; default: the config's)")->check(CLI::PositiveNumber);
    cmd.add_option("--run-dir", o.run_dir,
                   "the run's folder: checkpoints and log (with -m; default ~/.cache/kvsieve/train/METHOD/MODEL)");
    cmd.add_option("--predictor-dir", o.predictor_dir,
                   "where the predictor is written (with -m; default ~/.local/share/kvsieve/models/METHOD/MODEL, "
                   "where --policy METHOD finds it)");
    cmd.add_option("--set", o.sets, "KEY=VALUE: set a config key (dotted, e.g. optim.lr=0.005; with -m), repeatable");
}

void set_dotted(json& j, const std::string& key, const std::string& value) {
    require(!key.empty() && key.front() != '.' && key.back() != '.' && key.find("..") == std::string::npos,
            "--set: malformed key '", key, "' (dotted names, e.g. optim.lr)");
    json v = json::parse(value, nullptr, false);
    if (v.is_discarded()) v = value;
    json* at = &j;
    size_t a = 0;
    for (;;) {
        const size_t b = key.find('.', a);
        const std::string part = key.substr(a, b == std::string::npos ? std::string::npos : b - a);
        require(at->is_object(), "--set ", key, ": '", key.substr(0, a - 1), "' is not an object in the config");
        if (b == std::string::npos) {
            (*at)[part] = v;
            return;
        }
        if (!at->contains(part)) (*at)[part] = json::object();
        at = &(*at)[part];
        a = b + 1;
    }
}

QuickTrainPlan plan_quick_train(const LearnedMethod& method, const std::string& config_path,
                                const QuickTrainOptions& o) {
    require(!o.model.empty(), "train ", method.name,
            ": give -m MODEL.gguf (the model to train a predictor for) or --config FILE");
    const std::string model = need_file(o.model, "model");
    std::string path = config_path;
    if (path.empty()) {
        const std::string rel = method.config_dir + "/" + method.smollm2_config;
        path = find_shipped(rel);
        require(!path.empty(), "train ", method.name, ": the method's config ", rel,
                " is not installed beside this binary (share/kvsieve) nor in its source tree; give --config FILE");
    }
    json c = read_absolute_config(path, "train " + method.name);

    // The model and the corpus under the names this config uses.
    const bool names_model = c.contains("model") && c["model"].is_string();
    c[names_model ? "model" : "init"] = model;
    if (!o.corpus.empty()) {
        json list = json::array();
        for (const std::string& f : o.corpus) list.push_back(need_file(f, "corpus file"));
        if (c.contains("corpus"))
            c["corpus"] = list;
        else
            c["data"]["text"] = list;
    }
    if (o.steps > 0) {
        require(c.contains("optim"), "train ", method.name, " has no optimiser steps (--set its own keys instead)");
        c["optim"]["steps"] = o.steps;
    }
    for (const std::string& s : o.sets) {
        const size_t eq = s.find('=');
        require(eq != std::string::npos, "--set '", s, "': give KEY=VALUE");
        set_dotted(c, s.substr(0, eq), s.substr(eq + 1));
    }

    QuickTrainPlan p;
    const std::string stem = fs::path(model).stem().string();
    p.predictor_dir = method_folder(o.predictor_dir, user_predictor_dir(), method, model, "--predictor-dir");
    p.run_dir = method.predictor_key == "out" ? p.predictor_dir
                                              : method_folder(o.run_dir, user_train_dir(), method, model, "--run-dir");
    if (c.contains("name")) c["name"] = stem + "-" + method.name;
    c["out"] = p.run_dir;
    if (c.contains("output") && method.predictor_key != "output") c["output"] = p.run_dir + "/model.gguf";
    c[method.predictor_key] = p.predictor_dir;
    const json none = json::array();
    const json& files = c.contains("corpus") ? c["corpus"] : c.contains("data") ? c["data"].value("text", none) : none;
    for (const json& f : files)
        if (f.is_string()) need_file(f.get<std::string>(), "corpus file");
    p.config = std::move(c);
    return p;
}

void fill_flag_trainer_defaults(const LearnedMethod& method, json& j) {
    if (!j.contains("model") || !j["model"].is_string()) return;
    if (!j.contains("corpus")) {
        const std::string path = find_shipped(method.config_dir + "/" + method.smollm2_config);
        if (!path.empty()) {
            const json c = read_absolute_config(path, "train " + method.name);
            if (c.contains("corpus")) j["corpus"] = c["corpus"];
        }
    }
    if (!j.contains("out"))
        j["out"] = method_folder("", user_predictor_dir(), method, j["model"].get<std::string>(), "--out");
}

}  // namespace kvsieve::cli
