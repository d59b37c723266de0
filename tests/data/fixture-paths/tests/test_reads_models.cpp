// A test that reads a bundled model from the repository's models folder (line 3: rejected), and from tests/data (line 4).
#include <string>
const std::string kOld = std::string(KVSIEVE_SOURCE_DIR) + "/models/kvsieve-tiny-2k.gguf";
const std::string kNew = test::data_dir() + "/models/kvsieve-tiny-2k.gguf";
