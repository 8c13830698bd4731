// llama-quantize's presets for the deepseek41 tensor table: which type each tensor gets when a
// file is quantised to MXFP4_MOE, Q8_0, Q4_K_M, Q2_K or IQ2_XXS, following llama.cpp's
// src/llama-quant.cpp (llama_tensor_get_type and the rules it calls), so `make-model --quant`
// writes the mixes the published files have.
//
// The rules as they fall on this architecture's tensor names:
//   not quantised, kept as the converter wrote them (F32 here): the 1-D weights, ffn_gate_inp
//     (llama.cpp never quantises a router), and engram_q / engram_k (the DeepSeek-V4.1 branch
//     of llama.cpp exempts these per-channel gate scales; an earlier quantizer did not)
//   output.weight: Q8_0 under MXFP4_MOE, Q5_K under IQ2_XXS, Q8_0 under Q8_0, else Q6_K; Q8_0
//     when its rows are not whole blocks of the preset's type
//   token_embd.weight: Q8_0 under MXFP4_MOE, Q2_K under IQ2_XXS, else the preset's type
//   MXFP4_MOE: the 3-D expert tensors MXFP4, every other quantised tensor Q8_0
//   ffn_down (routed and shared): Q2_K -> Q3_K everywhere; Q4_K_M -> Q6_K on the layers
//     use_more_bits picks (the first and last eighth, then every third); IQ2_XXS -> Q2_K for
//     the first n_layer/8 ffn_down tensors in llama.cpp's tensor order (by layer, then name:
//     a counter, so it covers both of a layer's ffn_down tensors)
//   everything else (attention, compressor, indexer, mHC, shared and routed gate/up, the Engram
//     table and projection): the preset's type. No tensor of this architecture is named
//     attn_v / attn_qkv / attn_kv_b / attn_output, so llama.cpp's attention rules do not apply;
//     indexer.attn_k is llama.cpp's "attn_k" category, whose rules here (8-expert models, IQ3
//     presets) do not apply either.
// A tensor whose rows are not a multiple of the type's block (256 for the K-quants and
// IQ2_XXS) falls back as llama.cpp's tensor_type_fallback does, except that llama.cpp's
// fallbacks Q4_0, Q5_0, Q5_1 and IQ4_NL are types this engine lacks: Q8_0, the nearest it has,
// takes their place; F16 where rows are not whole blocks of 32 either (llama.cpp does so after
// its 256-weight fallbacks, and refuses a Q8_0 or MXFP4 target outright).
// llama-quantize refuses IQ2_XXS without an importance matrix; make-model's quantisers use none
// (tensor/kquant_quantizers.h), so the mix is llama.cpp's and the values are not.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "model/dsv41.h"
#include "tensor/ggml_types.h"

namespace bg {

enum class QuantPreset : uint8_t { kMxfp4Moe, kQ8_0, kQ4_K_M, kQ2_K, kIq2_Xxs };

const std::vector<QuantPreset>& all_quant_presets();
// llama-quantize's name ("MXFP4_MOE", "Q8_0", "Q4_K_M", "Q2_K", "IQ2_XXS").
const char* quant_preset_name(QuantPreset p);
// Parses a preset name in any letter case; throws bg::Error listing the presets otherwise.
QuantPreset parse_quant_preset(const std::string& name);
// The LLAMA_FTYPE number llama.cpp records as general.file_type for the preset.
uint32_t quant_preset_llama_ftype(QuantPreset p);
// llama.cpp's name of a general.file_type value ("Q3_K_M", "MOSTLY_BF16" as "BF16", ...), for
// any LLAMA_FTYPE it defines; nullptr for a value it does not.
const char* llama_ftype_name(uint32_t ftype);

// The type of each tensor of `specs` (a deepseek41 tensor table, tensor_specs' order) under
// the preset; hp gives the layer count llama.cpp's layer rules use (block_count).
std::vector<GgmlType> preset_tensor_types(QuantPreset p, const dsv41::HParams& hp,
                                          const std::vector<dsv41::TensorSpec>& specs);

}  // namespace bg
