#pragma once
// Re-encoding the weight matrices of a GGUF model into another weight type.
#include <string>

#include "kernels/tensor_types.h"

namespace kvsieve {

/// Writes `out`: every 2-D weight matrix of `in` (token embedding, output and block projections) converted
/// to `type` (F32, F16, BF16, Q8_0 or Q4_0; through float32, row by row), every other tensor and all
/// metadata copied unchanged, general.file_type updated. Throws Error for an unsupported target type or a
/// source tensor kvsieve cannot read.
void quantize_model(const std::string& in, const std::string& out, TensorType type);

}  // namespace kvsieve
