#pragma once
// Matrix products with weight matrices of any supported type.
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "kernels/tensor_types.h"

namespace kvsieve {

/// How the bytes of a row are laid out: as in GGUF (interleaved blocks), or Q8_0 re-laid with quants first
/// and scales after (kernels/repack.h).
enum class RowLayout { kGGUF, kSplitQ8 };

/// A read-only view of a 2-D weight tensor: `rows` rows of `cols` weights of `type`, each row
/// `row_bytes` apart (GGUF ne = [cols, rows]; a linear layer maps cols inputs to rows outputs).
struct WeightMatrix {
    TensorType type = TensorType::F32;
    int64_t rows = 0;
    int64_t cols = 0;
    size_t row_bytes = 0;
    const uint8_t* data = nullptr;
    std::string name;
    RowLayout layout = RowLayout::kGGUF;

    const uint8_t* row(int64_t r) const { return data + static_cast<size_t>(r) * row_bytes; }
    size_t nbytes() const { return row_bytes * static_cast<size_t>(rows); }
};

/// Y[t][r] = Σ_c W[r][c] · X[t][c] for t < T (X: [T][cols] row-major, Y: [T][rows] row-major; ldy ≥ rows
/// is Y's row stride). Small T: threaded GEMV over rows with the type's dot kernel, every weight read once
/// for all T vectors (activations quantized to Q8_0 / Q8_1 / Q8_K where activation_type() says so). Large T: row
/// panels of W are dequantized to float32 into a bounded scratch buffer and multiplied with OpenBLAS SGEMM; F32 weights
/// go to SGEMM directly. Never holds a dequantized copy of more than one panel.
/// Both paths give bit-identical Y at any thread count: the GEMV path computes each output row on one thread, and the
/// SGEMM path computes fixed tiles of kGemmTokenBlock × kGemmColBlock outputs, each by one single-threaded SGEMM on
/// kvsieve's threads (one multi-threaded SGEMM over the whole product is not reproducible across thread counts).
/// path kRowExact: always the GEMV path, whose result for a row of X does not depend on T or on the other rows
/// (what a batch of sequences needs so that each gets the numbers it would get alone).
enum class MatmulPath { kAuto, kRowExact };
void matmul(const WeightMatrix& W, const float* X, int64_t T, float* Y, int64_t ldy = -1,
            MatmulPath path = MatmulPath::kAuto);

/// One output of matmul_shared_input: Y = X · Wᵀ with Y [T][W->rows] row-major.
struct MatmulTarget {
    const WeightMatrix* W;
    float* Y;
};

/// Several matmul()s of the same activations X [T][cols] (every W has `cols` columns), e.g. the Q, K and V
/// projections: the same results as calling matmul for each target, but on the GEMV path the activations are
/// quantized once per activation format and all rows of all targets are shared out in one parallel loop (one
/// fork and barrier instead of one per matrix). Throws Error if the column counts differ.
void matmul_shared_input(const std::vector<MatmulTarget>& targets, const float* X, int64_t T,
                         MatmulPath path = MatmulPath::kAuto);

/// Same product through the scalar reference kernels only (for tests).
void matmul_reference(const WeightMatrix& W, const float* X, int64_t T, float* Y);

/// Number of tokens from which matmul switches from GEMV to panel SGEMM.
constexpr int64_t kGemmMinTokens = 32;

/// Output tile of the SGEMM path: activation rows (tokens) × weight rows. The tiling depends only on the product's
/// shape, never on the thread count, so each output is computed by the same SGEMM call at any -t. 256 × 256 tiles
/// pack each operand block once per 256 outputs of the other side (128 × 128 tiles measured about 7% slower on a
/// 512-token prefill of SmolLM2-135M) and still give such a prefill 6 tiles of each 576-row matrix to share out.
constexpr int64_t kGemmTokenBlock = 256;
constexpr int64_t kGemmColBlock = 256;

/// Dequantizes row r of W into dst[cols] (float32).
void dequantize_weight_row(const WeightMatrix& W, int64_t r, float* dst);

}  // namespace kvsieve
