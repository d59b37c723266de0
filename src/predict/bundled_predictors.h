#pragma once
// The trained predictors kvsieve finds by itself, as kvpress finds a KVzap checkpoint from the model's name: a
// learned preset whose spec gives no `model=` (`--policy wgkv`) takes the predictor trained for the loaded model,
// matched by the digest of the model's tensors that training recorded (config.json "model_digest",
// io/model_digest.h), never by file name alone.
//
// Where predictors are looked for, in order (a folder that does not exist is skipped):
//   1. each folder of $KVSIEVE_PREDICTOR_PATH (':'-separated)
//   2. the user's folder, where `kvsieve train METHOD -m MODEL.gguf` writes: $XDG_DATA_HOME/kvsieve/models (default
//      ~/.local/share/kvsieve/models; predict/data_dirs.h)
//   3. the installed folder: <prefix>/share/kvsieve/models, found from the running binary (<prefix>/bin/kvsieve)
//   4. the source tree's models/, for the binaries of its build tree only
// Each holds <method>/<name>/config.json (+ model.safetensors), <method> a registered learned method
// (predict/learned_methods.h): models/kvzap/smollm2-135m-mlp, models/spkv/smollm2-135m-frozen, models/wgkv/...
//
// The model is selected once per process (select_predictor_model): one model per CLI process, the served model in
// `kvsieve serve`.
#include <optional>
#include <string>
#include <vector>

namespace kvsieve {

class GGUFFile;

/// A predictor found on the search path.
struct BundledPredictor {
    std::string preset;        ///< the preset whose model= it fills: kvzap, spkv, wgkv, kvpop (mLSTM) or kvpop_mlp
    std::string name;          ///< its folder's name (smollm2-135m-mlp)
    std::string path;          ///< its folder
    std::string model_digest;  ///< the digest of the model it was trained for ("" when not recorded)
    std::string base_model;    ///< the model file it was trained on, as recorded ("" when not)
    bool is_default = false;   ///< config.json "default": true, the one a spec without model= takes
};

/// The folders searched, in order (see the file comment), those that exist.
std::vector<std::string> predictor_search_path();

/// Every predictor on the search path whose config.json names its folder's method (model_type kvzap, spkv, wgkv,
/// kvpop: predict/learned_methods.h), in search
/// order and by name within a folder; a name found twice is kept from the first folder. Folders whose config.json
/// is not JSON are skipped with one warning on stderr.
std::vector<BundledPredictor> list_predictors();

/// Selects the model whose predictors a spec without model= takes: its digest (io/model_digest.h) and, for
/// messages, its file name.
void select_predictor_model(const GGUFFile& f);
/// select_predictor_model of the GGUF at `gguf_path` (opened, not loaded). Throws Error when it cannot be read.
void select_predictor_model(const std::string& gguf_path);
/// select_predictor_model for a digest already computed (tests, the server).
void select_predictor_model_digest(const std::string& digest, const std::string& label);
/// The selected model's digest; "" when none is selected.
std::string selected_model_digest();

/// The predictors trained for the selected model (list_predictors() whose model_digest is its digest); empty when no
/// model is selected.
std::vector<BundledPredictor> ready_predictors();

/// The folder of the predictor `preset` takes for the selected model when its spec gives no model=: the one marked
/// default among ready_predictors() of that preset, else the first by name. Throws Error when no model is selected
/// (model= is then required) or none was trained for it: the message names the predictors of that preset that exist
/// (and the model each was trained for) and the command that trains one for this model.
std::string default_predictor_path(const std::string& preset);

/// The folder of the predictor named `name` for `preset` among ready_predictors(), nullopt when there is none
/// (`kvzap:model=smollm2-135m-linear`).
std::optional<std::string> predictor_path_by_name(const std::string& preset, const std::string& name);

/// The names of ready_predictors() of `preset`, comma-separated, "none" when there are none (for messages).
std::string ready_predictor_names(const std::string& preset);

}  // namespace kvsieve
