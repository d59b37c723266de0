// kvsieve inspect MODEL: metadata and tensor table of a GGUF file.
#include <cstdio>

#include "cli/commands.h"
#include "io/gguf.h"
#include "kernels/tensor_types.h"

namespace kvsieve::cli {

namespace {
std::string value_str(const GGUFValue& v) {
    switch (v.type) {
        case GGUFValueType::STRING: return "\"" + (v.s.size() > 80 ? v.s.substr(0, 77) + "..." : v.s) + "\"";
        case GGUFValueType::FLOAT32:
        case GGUFValueType::FLOAT64: return std::to_string(v.f);
        case GGUFValueType::ARRAY: {
            std::string s = "[" + value_type_name(v.elem_type) + " × " + std::to_string(v.array.size()) + "]";
            return s;
        }
        default: return std::to_string(v.as_int());
    }
}
}  // namespace

void add_inspect(CLI::App& app) {
    auto* cmd = app.add_subcommand("inspect", "print the metadata and tensors of a GGUF file");
    auto path = std::make_shared<std::string>();
    auto tensors = std::make_shared<bool>(false);
    cmd->add_option("model", *path, "GGUF file")->required()->check(CLI::ExistingFile);
    cmd->add_flag("--tensors", *tensors, "list every tensor");
    cmd->callback([path, tensors] {
        GGUFFile f(*path);
        std::printf("GGUF v%u, %zu metadata entries, %zu tensors, alignment %lu, %lu bytes\n", f.version(),
                    f.metadata().size(), f.tensors().size(), static_cast<unsigned long>(f.alignment()),
                    static_cast<unsigned long>(f.file_size()));
        for (const auto& [k, v] : f.metadata()) std::printf("  %-45s %s\n", k.c_str(), value_str(v).c_str());
        if (*tensors)
            for (const auto& t : f.tensors())
                std::printf("  %-40s %-6s %-20s %lu bytes\n", t.name.c_str(), type_name(t.type).c_str(),
                            t.shape_str().c_str(), static_cast<unsigned long>(t.nbytes));
    });
}

}  // namespace kvsieve::cli
