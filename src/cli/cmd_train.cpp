// kvsieve-train NAME: one subcommand per registered trainer (cli/trainers.h).
#include <algorithm>
#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "cli/quick_train.h"
#include "cli/trainers.h"
#include "predict/learned_methods.h"
#include "util/error.h"
#include "util/file.h"

namespace kvsieve::cli {

namespace {
/// `kvsieve train METHOD -m MODEL`: the plan's config written into its run folder, the run resumed when that folder
/// has a checkpoint, and where the predictor went said at the end.
void run_quick(const LearnedMethod& method, const std::string& config, const QuickTrainOptions& quick, bool resume,
               bool progress, bool (*run)(const std::string&, bool, bool)) {
    const QuickTrainPlan plan = plan_quick_train(method, config, quick);
    std::filesystem::create_directories(plan.run_dir);
    const std::string path = plan.run_dir + "/train-config.json";
    write_text(path, plan.config.dump(2) + "\n");
    const bool again = resume || std::filesystem::exists(plan.run_dir + "/checkpoint.pt");
    if (progress)
        std::fprintf(stderr, "train %s for %s: %s run in %s (its config: %s)\n", method.name.c_str(),
                     quick.model.c_str(), again ? "resuming the" : "a new", plan.run_dir.c_str(), path.c_str());
    if (!run(path, again, progress)) throw CLI::RuntimeError(130);
    if (progress)
        std::fprintf(stderr, "predictor: %s\n  kvsieve generate -m %s --policy %s   finds it for this model\n",
                     plan.predictor_dir.c_str(), quick.model.c_str(), method.presets.front().c_str());
}

std::vector<TrainerSpec>& registry() {
    static std::vector<TrainerSpec> r;
    return r;
}

std::vector<TrainerSpec (*)()>& builtin() {
    static std::vector<TrainerSpec (*)()> b;
    return b;
}

/// The built-in trainers (KVSIEVE_TRAINER lines), made once, by name.
void register_builtin_trainers() {
    if (!registry().empty()) return;
    std::vector<TrainerSpec> specs;
    for (auto make : builtin()) specs.push_back(make());
    std::sort(specs.begin(), specs.end(), [](const TrainerSpec& a, const TrainerSpec& b) { return a.name < b.name; });
    for (TrainerSpec& s : specs) register_trainer(std::move(s));
}
}  // namespace

void add_builtin_trainer(TrainerSpec (*make)()) { builtin().push_back(make); }

void register_trainer(TrainerSpec spec) {
    for (const auto& t : registry()) require(t.name != spec.name, "trainer '", spec.name, "' is registered twice");
    registry().push_back(std::move(spec));
}

const std::vector<TrainerSpec>& trainers() { return registry(); }

TrainerSpec config_trainer(std::string name, std::string help, bool (*run)(const std::string&, bool, bool),
                           void (*evaluate)(const std::string&, bool), bool offers_eval_only) {
    TrainerSpec s;
    s.name = name;
    s.help = std::move(help);
    s.setup = [name, run, evaluate, offers_eval_only](CLI::App& cmd) {
        auto config = std::make_shared<std::string>();
        auto resume = std::make_shared<bool>(false), quiet = std::make_shared<bool>(false);
        auto eval_only = std::make_shared<bool>(false);
        // A learned method's trainer also trains in one command (-m MODEL.gguf, cli/quick_train.h).
        const LearnedMethod* method = find_learned_method(name);
        if (method && method->trainer != name) method = nullptr;
        auto quick = std::make_shared<QuickTrainOptions>();
        auto* config_opt = cmd.add_option("--config", *config,
                                          method ? "JSON config (docs/training.md); with -m, the base the flags change "
                                                   "(default: the method's shipped config)"
                                                 : "JSON config (docs/training.md)");
        config_opt->check(CLI::ExistingFile);
        if (method)
            add_quick_train_options(cmd, *quick);
        else
            config_opt->required();
        cmd.add_flag("--resume", *resume, "continue from the run directory's checkpoint");
        cmd.add_flag("-q,--quiet", *quiet, "no progress output");
        if (offers_eval_only)
            cmd.add_flag("--eval-only", *eval_only,
                         "evaluate the run directory's checkpoint as the config's \"eval\" says, print it as JSON on "
                         "stdout and write nothing");
        cmd.callback([name, run, evaluate, config, resume, quiet, eval_only, method, quick] {
            if (!run)
                fail("train ", name,
                     " needs the libtorch training stack, which this build does not include (install "
                     "libtorch-dev and rebuild)");
            if (method && !quick->model.empty()) {
                require(!*eval_only, "--eval-only takes --config, not -m");
                run_quick(*method, *config, *quick, *resume, !*quiet, run);
                return;
            }
            if (method) {
                require(!config->empty(), "train ", name,
                        ": give -m MODEL.gguf (the model to train a predictor for) or --config FILE");
                require(quick->corpus.empty() && quick->steps == 0 && quick->sets.empty() && quick->run_dir.empty() &&
                            quick->predictor_dir.empty(),
                        "--corpus, --steps, --set, --run-dir and --predictor-dir go with -m MODEL.gguf");
            }
            if (*eval_only) {
                require(!*resume, "--eval-only and --resume exclude each other (--eval-only trains nothing)");
                evaluate(*config, !*quiet);
                return;
            }
            // Interrupted (SIGINT/SIGTERM, checkpoint saved): exit 130 so scripts chaining runs stop here.
            if (!run(*config, *resume, !*quiet)) throw CLI::RuntimeError(130);
        });
    };
    return s;
}

TrainerSpec config_trainer(std::string name, std::string help, std::vector<ConfigFlag> flags,
                           void (*run)(const nlohmann::json&, const std::string&, bool)) {
    TrainerSpec s;
    s.name = name;
    s.help = std::move(help);
    s.setup = [name, flags, run](CLI::App& cmd) {
        auto config = std::make_shared<std::string>();
        auto quiet = std::make_shared<bool>(false);
        cmd.add_option("--config", *config, "JSON config (docs/training.md); the flags below override its keys")
            ->check(CLI::ExistingFile);
        cmd.add_flag("-q,--quiet", *quiet, "no progress output");
        // One slot per flag: the text(s) given, read into the config's key after parsing.
        auto values = std::make_shared<std::vector<std::vector<std::string>>>(flags.size());
        auto given = std::make_shared<std::vector<bool>>(flags.size(), false);
        for (size_t i = 0; i < flags.size(); ++i) {
            const ConfigFlag& f = flags[i];
            if (f.kind == ConfigFlag::Kind::kSwitch) {
                cmd.add_flag_callback(
                    f.names, [given, i] { (*given)[i] = true; }, f.help);
                continue;
            }
            auto* o = cmd.add_option(f.names, (*values)[i], f.help);
            if (f.kind != ConfigFlag::Kind::kPaths) o->expected(1);
            if (f.kind == ConfigFlag::Kind::kInt) o->check(CLI::Number);
            if (f.kind == ConfigFlag::Kind::kReal) o->check(CLI::Number);
        }
        cmd.callback([name, flags, run, config, quiet, values, given] {
            nlohmann::json j = nlohmann::json::object();
            std::string base;
            if (!config->empty()) {
                try {
                    j = nlohmann::json::parse(std::ifstream(*config));
                } catch (const nlohmann::json::exception& e) {
                    fail("train ", name, ": '", *config, "' is not JSON: ", e.what());
                }
                require(j.is_object(), "train ", name, ": '", *config, "' must hold a JSON object");
                base = std::filesystem::path(*config).parent_path().string();
                if (base.empty()) base = ".";
            }
            for (size_t i = 0; i < flags.size(); ++i) {
                const ConfigFlag& f = flags[i];
                const auto& v = (*values)[i];
                if (f.kind == ConfigFlag::Kind::kSwitch) {
                    if ((*given)[i]) j[f.key] = true;
                    continue;
                }
                if (v.empty()) continue;
                auto abs = [](const std::string& p) { return std::filesystem::absolute(p).string(); };
                switch (f.kind) {
                    case ConfigFlag::Kind::kText: j[f.key] = v.back(); break;
                    case ConfigFlag::Kind::kPath: j[f.key] = abs(v.back()); break;
                    case ConfigFlag::Kind::kPaths: {
                        nlohmann::json list = nlohmann::json::array();
                        for (const auto& p : v) list.push_back(abs(p));
                        j[f.key] = list;
                        break;
                    }
                    case ConfigFlag::Kind::kInt:
                        try {
                            size_t end = 0;
                            j[f.key] = std::stoll(v.back(), &end);
                            require(end == v.back().size(), "");
                        } catch (const std::exception&) {
                            fail("train ", name, ": ", f.names, " takes an integer, got '", v.back(), "'");
                        }
                        break;
                    case ConfigFlag::Kind::kReal: j[f.key] = std::stod(v.back()); break;
                    case ConfigFlag::Kind::kSwitch: break;
                }
            }
            if (const LearnedMethod* m = find_learned_method(name); m && m->trainer == name && config->empty())
                fill_flag_trainer_defaults(*m, j);
            run(j, base, !*quiet);
        });
    };
    return s;
}

void add_trainers(CLI::App& app) {
    app.require_subcommand(1);
    register_builtin_trainers();
    for (const TrainerSpec& t : trainers()) t.setup(*app.add_subcommand(t.name, t.help));
}

}  // namespace kvsieve::cli
