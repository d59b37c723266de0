#include "kernels/tensor_types.h"

#include <algorithm>
#include <cctype>

#include "util/error.h"

namespace kvsieve {
namespace {
struct TypeRow {
    uint32_t id;
    const char* name;
    int64_t blck;
    size_t bytes;
    bool supported;
};
// Geometry of ggml's types (ggml.h / ggml.c type traits). Types kvsieve cannot compute with are listed so
// files holding them can still be size-checked and reported precisely.
constexpr TypeRow kTypes[] = {
    {0, "F32", 1, 4, true},          {1, "F16", 1, 2, true},          {2, "Q4_0", 32, 18, true},
    {3, "Q4_1", 32, 20, true},       {6, "Q5_0", 32, 22, true},       {7, "Q5_1", 32, 24, true},
    {8, "Q8_0", 32, 34, true},       {9, "Q8_1", 32, 36, false},      {10, "Q2_K", 256, 84, true},
    {11, "Q3_K", 256, 110, true},    {12, "Q4_K", 256, 144, true},    {13, "Q5_K", 256, 176, true},
    {14, "Q6_K", 256, 210, true},    {15, "Q8_K", 256, 292, false},   {16, "IQ2_XXS", 256, 66, false},
    {17, "IQ2_XS", 256, 74, false},  {18, "IQ3_XXS", 256, 98, false}, {19, "IQ1_S", 256, 50, false},
    {20, "IQ4_NL", 32, 18, false},   {21, "IQ3_S", 256, 110, false},  {22, "IQ2_S", 256, 82, false},
    {23, "IQ4_XS", 256, 136, false}, {24, "I8", 1, 1, false},         {25, "I16", 1, 2, false},
    {26, "I32", 1, 4, false},        {27, "I64", 1, 8, false},        {28, "F64", 1, 8, false},
    {29, "IQ1_M", 256, 56, false},   {30, "BF16", 1, 2, true},        {34, "TQ1_0", 256, 54, false},
    {35, "TQ2_0", 256, 66, false},
};

const TypeRow* find(uint32_t id) {
    for (const auto& r : kTypes)
        if (r.id == id) return &r;
    return nullptr;
}
}  // namespace

int64_t block_size(TensorType t) { return find(static_cast<uint32_t>(t))->blck; }
size_t block_bytes(TensorType t) { return find(static_cast<uint32_t>(t))->bytes; }

size_t row_bytes(TensorType t, int64_t n) {
    const int64_t b = block_size(t);
    require(n % b == 0, "row of ", n, " elements is not a multiple of the ", type_name(t), " block size ", b);
    return static_cast<size_t>(n / b) * block_bytes(t);
}

bool is_supported_type(uint32_t id) {
    const TypeRow* r = find(id);
    return r && r->supported;
}

std::string type_name(uint32_t id) {
    const TypeRow* r = find(id);
    return r ? std::string(r->name) : cat("type ", id);
}

bool ggml_type_geometry(uint32_t id, int64_t* blck, size_t* bytes) {
    const TypeRow* r = find(id);
    if (!r) return false;
    *blck = r->blck;
    *bytes = r->bytes;
    return true;
}

TensorType parse_type(const std::string& name) {
    std::string up = name;
    std::transform(up.begin(), up.end(), up.begin(), [](unsigned char c) { return std::toupper(c); });
    for (const auto& r : kTypes)
        if (r.supported && up == r.name) return static_cast<TensorType>(r.id);
    std::string names;
    for (const auto& r : kTypes)
        if (r.supported) {
            std::string low = r.name;
            std::transform(low.begin(), low.end(), low.begin(), [](unsigned char c) { return std::tolower(c); });
            names += (names.empty() ? "" : ", ") + low;
        }
    fail("unknown weight type '", name, "' (expected one of ", names, ")");
}

}  // namespace kvsieve
