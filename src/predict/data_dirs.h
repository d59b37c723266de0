#pragma once
// Where kvsieve's files live outside the working directory: what ships with it (the trained predictors, the learned
// methods' training configs and the corpora they read) and what a user makes (predictors trained with
// `kvsieve train METHOD -m MODEL.gguf`, their run folders).
//
// Shipped files are looked for in the installed folder <prefix>/share/kvsieve (found from the running binary,
// <prefix>/bin/kvsieve), then in the source tree, for the binaries of its build tree only (an installed binary never
// reads the tree it was built from). There, predictors are models/<method>/<name>/, configs configs/<method>/*.json and
// corpora data/corpora/*, so a config's relative corpus paths ("../../data/corpora/wiki.test.raw") hold in both.
//
// A user's files follow the XDG base directories: predictors in $XDG_DATA_HOME/kvsieve/models (default
// ~/.local/share/kvsieve/models), training runs in $XDG_CACHE_HOME/kvsieve/train (default ~/.cache/kvsieve/train).
#include <string>
#include <vector>

namespace kvsieve {

/// The folders that may hold shipped files, in the order above, those that exist: <prefix>/share/kvsieve and, for a
/// build-tree binary, the source tree's root.
std::vector<std::string> shipped_dirs();

/// The first shipped file or folder at `relative` (e.g. "configs/wgkv/smollm2-wgkv.json") among shipped_dirs();
/// "" when none has it.
std::string find_shipped(const std::string& relative);

/// The folder where a user's trained predictors are written and found: $XDG_DATA_HOME/kvsieve/models, else
/// $HOME/.local/share/kvsieve/models; "" when neither variable is set. Not created here.
std::string user_predictor_dir();

/// The folder of a user's training runs (checkpoints, logs): $XDG_CACHE_HOME/kvsieve/train, else
/// $HOME/.cache/kvsieve/train; "" when neither variable is set. Not created here.
std::string user_train_dir();

}  // namespace kvsieve
