// A test that reads bundled models from the repository's models folder (lines 3 and 5: rejected), and from tests/data (lines 4 and 6).
#include <string>
const std::string kOld = std::string(KVSIEVE_SOURCE_DIR) + "/models/kvsieve-tiny-2k.gguf";
const std::string kNew = test::data_dir() + "/models/kvsieve-tiny-2k.gguf";
const std::string kOldKvzap = "kvzap:model=" + std::string(KVSIEVE_SOURCE_DIR) + "/models/kvzap/stories260K-linear";
const std::string kNewKvzap = "kvzap:model=" + test::model_path("kvzap/stories260K-linear");
