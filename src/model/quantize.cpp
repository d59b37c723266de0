#include "model/quantize.h"

#include <vector>

#include "io/gguf.h"
#include "io/gguf_writer.h"
#include "kernels/quant.h"
#include "predict/predictor_tensors.h"
#include "util/error.h"

namespace kvsieve {

namespace {
/// ggml's LLAMA_FTYPE numbers of the "mostly X" file types.
uint32_t file_type(TensorType t) {
    switch (t) {
        case TensorType::F32: return 0;
        case TensorType::F16: return 1;
        case TensorType::Q4_0: return 2;
        case TensorType::Q4_1: return 3;
        case TensorType::Q8_0: return 7;
        case TensorType::Q5_0: return 8;
        case TensorType::Q5_1: return 9;
        case TensorType::Q2_K: return 10;
        case TensorType::Q3_K: return 12;  // LLAMA_FTYPE_MOSTLY_Q3_K_M (every matrix Q3_K here)
        case TensorType::Q5_K: return 17;  // LLAMA_FTYPE_MOSTLY_Q5_K_M (every matrix Q5_K here)
        case TensorType::BF16: return 32;
        default: fail("no file type for ", type_name(t));
    }
}
}  // namespace

void quantize_model(const std::string& in, const std::string& out, TensorType type) {
    require(can_quantize_to(type), "quantize writes ", quantize_type_names(), ", not ", type_name(type));
    GGUFFile f(in);
    GGUFWriter w;
    for (const auto& [k, v] : f.metadata())
        if (k != "general.file_type") w.set(k, v);
    w.set_u32("general.file_type", file_type(type));
    for (const auto& t : f.tensors()) {
        const std::vector<int64_t> ne(t.ne, t.ne + t.n_dims);
        // Learned predictors (SP-KV gates …) stay as they are: tiny, and their thresholds want full precision.
        const bool matrix = !is_predictor_tensor(t.name) && t.n_dims == 2 && t.name.size() > 7 &&
                            t.name.compare(t.name.size() - 7, 7, ".weight") == 0 && t.ne[0] % block_size(type) == 0;
        if (!matrix || static_cast<TensorType>(t.type) == type) {
            w.add_tensor_ref(t.name, t.type, ne, t.data, t.nbytes);
            continue;
        }
        require(is_supported_type(t.type), in, ": tensor '", t.name, "' has type ", type_name(t.type),
                ", which kvsieve cannot read");
        const auto src_type = static_cast<TensorType>(t.type);
        const int64_t cols = t.ne[0], rows = t.ne[1];
        const size_t src_rb = row_bytes(src_type, cols), dst_rb = row_bytes(type, cols);
        const uint8_t* src = t.data;
        w.add_tensor_gen(t.name, static_cast<uint32_t>(type), ne, [=](uint8_t* dst, uint64_t) {
#pragma omp parallel
            {
                std::vector<float> row(cols);
#pragma omp for schedule(static)
                for (int64_t r = 0; r < rows; ++r) {
                    dequantize_row(src_type, src + r * src_rb, row.data(), cols);
                    quantize_row(type, row.data(), dst + r * dst_rb, cols);
                }
            }
        });
    }
    w.write(out);
}

}  // namespace kvsieve
