#pragma once
// Re-encoding the weight matrices of a GGUF model into another weight type.
#include <string>

#include "kernels/tensor_types.h"

namespace kvsieve {

/// Writes `out`: every 2-D weight matrix of `in` (token embedding, output and block projections) converted
/// to `type` (any type can_quantize_to() accepts; through float32, row by row; a matrix whose row length is
/// not a multiple of the type's block size keeps its type), every other tensor — learned predictors
/// (blk.<l>.spkv.* …, predict/predictor_tensors.h) included — and all metadata copied unchanged,
/// general.file_type updated. Throws Error for an unsupported target type or a
/// source tensor kvsieve cannot read.
void quantize_model(const std::string& in, const std::string& out, TensorType type);

}  // namespace kvsieve
