// kvsieve train spkv: SP-KV continued pretraining, the model and its utility gates trained together (docs/training.md;
// libtorch stack). kvsieve train spkv-gates: the gates of a trained GGUF copied out into a predictor folder
// (predict/spkv_export.h), which the training also writes (RUN/predictor).
#include <cstdio>

#include <nlohmann/json.hpp>

#include "cli/trainers.h"
#include "predict/spkv_export.h"
#include "util/error.h"
#ifdef KVSIEVE_HAVE_TRAIN
#include "train/spkv.h"
#endif

namespace kvsieve::cli {

TrainerSpec spkv_trainer() {
#ifdef KVSIEVE_HAVE_TRAIN
    constexpr auto run = &train::run_spkv;
    constexpr auto evaluate = &train::evaluate_spkv;
#else
    constexpr bool (*run)(const std::string&, bool, bool) = nullptr;
    constexpr void (*evaluate)(const std::string&, bool) = nullptr;
#endif
    return config_trainer(
        "spkv", "SP-KV: train a model and its KV utility gates together by next-token loss (docs/training.md)", run,
        evaluate, true);
}

namespace {
void run_spkv_gates(const nlohmann::json& config, const std::string&, bool progress) {
    require(config.contains("from") && config.contains("out"), "train spkv-gates needs --from GGUF and --out DIR");
    SpkvExportOptions o;
    o.base_model = config.value("base_model", std::string());
    o.f16 = config.value("f16", false);
    o.provenance = config.value("provenance", std::string());
    const std::string out = config["out"].get<std::string>();
    export_spkv_gates(config["from"].get<std::string>(), out, o);
    if (progress) std::fprintf(stderr, "wrote %s\n", out.c_str());
}
}  // namespace

TrainerSpec spkv_gates_trainer() {
    using K = ConfigFlag::Kind;
    return config_trainer(
        "spkv-gates",
        "copy the SP-KV gates of a trained GGUF into a predictor folder (model.safetensors + config.json) that "
        "--policy spkv finds by the base model's digest",
        {{"--from", "from", K::kPath, "GGUF holding the gates (a `train spkv` output)"},
         {"--base-model", "base_model", K::kText,
          "GGUF of the frozen model the gates were trained on, recorded as given with its digest (default: the "
          "--from file itself)"},
         {"--out", "out", K::kPath, "predictor folder to write"},
         {"--f16", "f16", K::kSwitch, "store the weights as binary16"},
         {"--provenance", "provenance", K::kText, "how the gates were made (default: the GGUF's record)"}},
        run_spkv_gates);
}

KVSIEVE_TRAINER(spkv_trainer);
KVSIEVE_TRAINER(spkv_gates_trainer);

}  // namespace kvsieve::cli
