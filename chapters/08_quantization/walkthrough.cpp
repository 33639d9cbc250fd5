// `tvlab 08_quantization` (alias `tvlab quant`): ggml's block formats. --step walks one block of 32
// weights through a format (scale, codes, bytes, values back, errors), --backend runs the registry
// on a random matrix (bytes and dequantized values against the reference's), --markdown prints
// results.md (the documents' sizes, bits per weight, the error of every format on the same data).

#include <cmath>
#include <cstring>
#include <iomanip>
#include <iostream>
#include <map>
#include <sstream>

#include "../common/backend_run.hpp"
#include "../common/run_cost.hpp"
#include "../common/walkthrough.hpp"
#include "backends.hpp"
#include "tvlab/core/error.hpp"
#include "tvlab/core/rng.hpp"
#include "tvlab/ref/block_quant.hpp"
#include "tvlab/ref/gguf.hpp"
#include "tvlab/ref/microscaling.hpp"
#include "tvlab/ref/nvfp4.hpp"
#include "tvlab/ref/pruning.hpp"
#include "tvlab/ref/quantized_gemv.hpp"
#include "tvlab/analysis/awq.hpp"
#include "tvlab/analysis/compression.hpp"
#include "tvlab/analysis/e8_lattice.hpp"
#include "tvlab/analysis/e8p.hpp"
#include "tvlab/analysis/incoherence.hpp"
#include "tvlab/analysis/model_size.hpp"
#include "tvlab/analysis/outlier_quant.hpp"
#include "tvlab/analysis/qat.hpp"
#include "tvlab/analysis/quant_error.hpp"

namespace tvlab::cli {
namespace {

struct Options : StandardOptions {
  int rows = 4, cols = 64;
  std::string type = "Q4_0";
  std::string gguf;        ///< a GGUF file to list (and, with --dump, to dequantize)
  std::string write_gguf;  ///< where to write the demonstration GGUF file
  bool gemv = false;       ///< run the quantized product y = W x instead of quantize / dequantize
};

// ------------------------------------------------------------------ the documents' numbers

double gigabytes(double parameters, double bits) { return parameters * bits / 8.0 / 1e9; }

// The documents' model sizes from the parameter counts they name, at 16 and 4 bits per weight.
std::vector<DocumentCheck> document_checks() {
  const double fp16 = gigabytes(70e9, 16.0), int4 = gigabytes(70e9, 4.0), v3 = gigabytes(671e9, 4.0);
  // ALBERT's cross-layer sharing alone, on BERT-base's shape: the layers counted once
  const analysis::EncoderShape bert;
  const double shared_fewer = 1.0 - static_cast<double>(analysis::encoder_parameters(bert, true)) /
                                        static_cast<double>(analysis::encoder_parameters(bert, false));
  // the same from LLaMA-2 70B's config, and the documents' mixed-precision recipe (QKV and O in
  // INT8, the FFN in INT4, the rest FP16)
  const analysis::DecoderParameters llama = analysis::decoder_parameters(analysis::decoder_shape("llama-2-70b"));
  const double config_fp16 = analysis::model_bytes(llama, {}) / 1e9;
  analysis::BitAllocation mixed;
  mixed.qkv = 8, mixed.output = 8, mixed.ffn = 4;
  const double mixed_ratio = config_fp16 * 1e9 / analysis::model_bytes(llama, mixed);
  return {
      check_number("000 L241", "LLaMA-2 70B weights in FP16, GB", "about 140 GB", 140.0, 10.0, fp16, fixed(fp16, 1)),
      check_number("000 L241", "the same from its config (68.98 billion weights), GB", "about 140 GB", 140.0, 10.0,
                   config_fp16, fixed(config_fp16, 2)),
      check_number("000 L257", "mixed precision (QKV, O INT8; FFN INT4) on LLaMA-2 70B, compression", "about 4x", 4.0,
                   1.0, mixed_ratio, fixed(mixed_ratio, 2)),
      check_number("000 L275", "ALBERT's cross-layer sharing, fewer parameters than BERT-base, %", "about 70%", 70.0,
                   10.0, 100.0 * shared_fewer, fixed(100.0 * shared_fewer, 1)),
      check_number("000 L243", "LLaMA-2 70B weights at 4 bits, GB", "about 35 GB", 35.0, 1.0, int4, fixed(int4, 1)),
      check_number("000 L243", "compression FP16 -> INT4", "4x", 4.0, 1.0, fp16 / int4, fixed(fp16 / int4, 2)),
      check_number("004 L179", "DeepSeek-V3 (671B) at 4 bits, GB", "about 335 GB", 335.0, 1.0, v3, fixed(v3, 1)),
  };
}

// ------------------------------------------------------------------ errors of the formats


struct FormatError {
  double rmse = 0.0, max_abs = 0.0;
};

FormatError format_error(const Tensor2& x, GgmlType type) {
  const auto& ref = reference_backend(quant::backends());
  const Tensor2 back = ref.dequantize(ref.quantize(x, type));
  double sum_sq = 0.0, max_abs = 0.0;
  for (std::size_t i = 0; i < x.size(); ++i) {
    const double e = static_cast<double>(x.data()[i]) - back.data()[i];
    sum_sq += e * e;
    max_abs = std::max(max_abs, std::fabs(e));
  }
  return {std::sqrt(sum_sq / static_cast<double>(x.size())), max_abs};
}

std::string error_table() {
  const Tensor2 gaussian = analysis::lesson_weights(false), with_outliers = analysis::lesson_weights(true);
  std::vector<std::vector<std::string>> rows;
  for (GgmlType type : quantized_types()) {
    const FormatError g = format_error(gaussian, type), o = format_error(with_outliers, type);
    rows.push_back({type_name(type), fixed(bits_per_weight(type), 2), sci(g.rmse, 3), sci(g.max_abs, 3),
                    sci(o.rmse, 3), sci(o.max_abs, 3)});
  }
  return markdown_table({"format", "bits per weight", "RMSE, N(0, 1)", "max error, N(0, 1)", "RMSE, 1% outliers x 20",
                         "max error, outliers"},
                        rows);
}

// Affine (uniform, symmetric) quantization of the same data: RMSE by bits, granularity and the
// rule that chooses the clipping range (analysis::quant_error_table).
std::string affine_table(bool outliers) {
  const auto table = analysis::quant_error_table(analysis::lesson_weights(outliers));
  std::vector<std::vector<std::string>> rows;
  for (std::size_t i = 0; i + 2 < table.size(); i += 3)
    rows.push_back({std::to_string(table[i].bits), table[i].granularity, sci(table[i].rmse, 3),
                    sci(table[i + 1].rmse, 3), sci(table[i + 2].rmse, 3)});
  return markdown_table({"bits", "granularity", "min-max", "percentile 99.9", "MSE-optimal clip"}, rows);
}

// The OCP microscaling formats (a power-of-two scale per 32 elements, FP8 or FP4 elements) next to
// the integer block formats of the same size, on the same data.
std::string microscaling_table() {
  const Tensor2 gaussian = analysis::lesson_weights(false), with_outliers = analysis::lesson_weights(true);
  std::vector<std::vector<std::string>> rows;
  for (ref::MxBlockFormat f : {ref::MxBlockFormat::mxfp8_e4m3, ref::MxBlockFormat::mxfp8_e5m2, ref::MxBlockFormat::mxfp4})
    rows.push_back({ref::mx_name(f), fixed(ref::mx_bits_per_element(f), 2), sci(ref::mx_round_trip_rmse(gaussian, f), 3),
                    sci(ref::mx_round_trip_rmse(with_outliers, f), 3)});
  rows.push_back({"NVFP4 (E2M1, an E4M3 scale per 16, one float32 scale)", fixed(4.5, 2),
                  sci(ref::nvfp4_round_trip_rmse(gaussian), 3), sci(ref::nvfp4_round_trip_rmse(with_outliers), 3)});
  for (GgmlType type : {GgmlType::q8_0, GgmlType::q4_0})
    rows.push_back({type_name(type), fixed(bits_per_weight(type), 2), sci(format_error(gaussian, type).rmse, 3),
                    sci(format_error(with_outliers, type).rmse, 3)});
  return markdown_table({"format", "bits per element", "RMSE, N(0, 1)", "RMSE, 1% outliers x 20"}, rows);
}

// Model sizes from their configs at the precisions of this chapter (bits per weight of the weight
// matrices; the embedding, the output layer and the norms stay FP16).
std::string model_size_markdown() {
  std::vector<std::vector<std::string>> rows;
  for (const analysis::DecoderShape& shape : analysis::decoder_shapes()) {
    const analysis::DecoderParameters p = analysis::decoder_parameters(shape);
    auto gigabytes_at = [&](double matrix_bits) {
      analysis::BitAllocation b;
      b.qkv = b.output = b.ffn = matrix_bits;
      return fixed(analysis::model_bytes(p, b) / 1e9, 1);
    };
    analysis::BitAllocation mixed;
    mixed.qkv = 8, mixed.output = 8, mixed.ffn = 4;
    rows.push_back({shape.name, fixed(static_cast<double>(p.total()) / 1e9, 2), gigabytes_at(16),
                    gigabytes_at(bits_per_weight(GgmlType::q8_0)), gigabytes_at(bits_per_weight(GgmlType::q4_0)),
                    fixed(analysis::model_bytes(p, mixed) / 1e9, 1)});
  }
  return markdown_table({"model", "parameters (billions)", "FP16, GB", "Q8_0, GB", "Q4_0, GB",
                         "attention INT8 + FFN INT4, GB"},
                        rows);
}

// llama.cpp's quantization mixes (llama-quantize's file types): every tensor's type by its rules,
// the file's tensor bytes in GiB and the bits per weight of the whole model.
std::string llama_cpp_mix_markdown() {
  const analysis::KQuantMix mixes[] = {analysis::KQuantMix::q4_0, analysis::KQuantMix::q4_K_S, analysis::KQuantMix::q4_K_M,
                                       analysis::KQuantMix::q5_K_M, analysis::KQuantMix::q6_K, analysis::KQuantMix::q8_0};
  std::vector<std::string> header = {"model"};
  for (analysis::KQuantMix mix : mixes) header.push_back(analysis::mix_name(mix) + ", GiB / bpw");
  std::vector<std::vector<std::string>> rows;
  for (const analysis::DecoderShape& shape : analysis::decoder_shapes()) {
    std::vector<std::string> row = {shape.name};
    for (analysis::KQuantMix mix : mixes) {
      const analysis::MixSize size = analysis::mix_size(shape, mix);
      row.push_back(fixed(size.gib(), 2) + " / " + fixed(size.bits_per_weight(), 2));
    }
    rows.push_back(row);
  }
  // which tensors get more bits in LLaMA-2 7B's Q4_K_M and Q4_K_S: count them by type and kind
  std::ostringstream which;
  for (analysis::KQuantMix mix : {analysis::KQuantMix::q4_K_S, analysis::KQuantMix::q4_K_M}) {
    std::map<std::string, std::map<std::string, int>> count;  // type -> kind -> tensors
    for (const analysis::TensorType& t : analysis::llama_cpp_tensor_types(analysis::decoder_shape("llama-2-7b"), mix)) {
      const std::string kind = t.name.rfind("blk.", 0) == 0 ? t.name.substr(t.name.find('.', 4) + 1) : t.name;
      ++count[t.type][kind.substr(0, kind.rfind(".weight"))];
    }
    which << "- " << analysis::mix_name(mix) << ":";
    for (const auto& [type, kinds] : count) {
      if (type == "F32") continue;
      which << " " << type << " (";
      bool first = true;
      for (const auto& [kind, n] : kinds) which << (first ? "" : ", ") << n << " " << kind, first = false;
      which << ");";
    }
    which << " norms in F32\n";
  }
  return markdown_table(header, rows) + "\nLLaMA-2 7B's tensors by type:\n\n" + which.str();
}

// Low-rank factorisation of a random and of a structured matrix (rank 16 plus 1% noise), 128 x 128.
std::string low_rank_markdown() {
  Rng rng(838);
  const DTensor2 random = rng.normal_dmatrix(128, 128), a = rng.normal_dmatrix(128, 16), b = rng.normal_dmatrix(16, 128);
  DTensor2 structured = DTensor2::from_shape({128, 128});
  for (std::size_t i = 0; i < 128; ++i)
    for (std::size_t j = 0; j < 128; ++j) {
      double s = 0.0;
      for (std::size_t k = 0; k < 16; ++k) s += a(i, k) * b(k, j);
      structured(i, j) = s + 0.04 * rng.normal();  // noise of 1% of an entry's spread (sqrt(16) = 4)
    }
  const std::vector<std::size_t> ranks = {4, 8, 16, 32, 64};
  const auto r = analysis::low_rank_table(random, ranks), s = analysis::low_rank_table(structured, ranks);
  std::vector<std::vector<std::string>> rows;
  for (std::size_t i = 0; i < ranks.size(); ++i)
    rows.push_back({std::to_string(ranks[i]), fixed(r[i].compression, 1) + "x", fixed(r[i].relative_error, 3),
                    fixed(s[i].relative_error, 4)});
  const analysis::EncoderShape bert;
  analysis::EncoderShape albert;
  albert.vocab_size = 30000;
  albert.embedding_size = 128;
  std::ostringstream md;
  md << "W [128, 128] as L [128, r] R [r, 128] by the truncated SVD; relative Frobenius error of L R:\n\n"
     << markdown_table({"rank r", "compression mn / r(m + n)", "N(0, 1) matrix", "rank 16 + 1% noise"}, rows)
     << "\nParameters of BERT-base, its layers shared, and ALBERT-base (encoder and pooler):\n\n"
     << markdown_table({"model", "parameters"},
                       {{"BERT-base", std::to_string(analysis::encoder_parameters(bert, false))},
                        {"BERT-base, one layer shared by all 12", std::to_string(analysis::encoder_parameters(bert, true))},
                        {"ALBERT-base (shared layers, embedding 128 wide)",
                         std::to_string(analysis::encoder_parameters(albert, true))}});
  return md.str();
}

// INT8 with outlier activation channels: W8A8, LLM.int8() and SmoothQuant on the same layer.
std::string outliers_markdown() {
  DTensor2 x, w;
  analysis::outlier_example(x, w);
  std::size_t outliers = 0;
  const DTensor2 decomposed = analysis::llm_int8_product(x, w, 6.0, &outliers);
  auto error = [&](const DTensor2& y) { return sci(analysis::relative_output_error(x, w, y), 2); };
  std::vector<std::vector<std::string>> rows = {
      {"W8A8, one scale per tensor", error(analysis::w8a8_product(x, w, analysis::Int8Scales::per_tensor))},
      {"W8A8, vector-wise (per token, per output)", error(analysis::w8a8_product(x, w, analysis::Int8Scales::vector_wise))},
      {"LLM.int8(), tau = 6 (" + std::to_string(outliers) + " of 256 channels in floating point)", error(decomposed)},
      {"SmoothQuant, alpha = 0.5, then one scale per tensor", error(analysis::smoothquant_product(x, w, 0.5))},
      {"SmoothQuant, alpha = 0.85", error(analysis::smoothquant_product(x, w, 0.85))}};
  return markdown_table({"method", "relative error of X W"}, rows);
}

// AWQ against round-to-nearest, weight-only INT4 in groups of 128, the scale exponent searched on
// 128 calibration tokens, the error measured on 64 others.
std::string awq_markdown() {
  DTensor2 x, w;
  analysis::outlier_example(x, w);
  const DTensor2 calibration = analysis::outlier_activations(860, 128), held_out = analysis::outlier_activations(861, 64);
  const analysis::AwqSearch search = analysis::awq_search(calibration, w, 128);
  auto error = [&](double alpha) {
    return sci(analysis::relative_output_error(held_out, w, analysis::awq_product(held_out, w, calibration, alpha, 128)), 2);
  };
  return markdown_table({"weights INT4, groups of 128", "relative error of X W (held-out tokens)"},
                        {{"round to nearest (alpha = 0)", error(0.0)},
                         {"AWQ, alpha = " + fixed(search.best_alpha, 2) + " (searched on the calibration tokens)",
                          error(search.best_alpha)}});
}

// Incoherence processing: weights with 0.5% outliers x 10, rounded per row directly and after the
// randomized Hadamard rotation.
std::string incoherence_markdown() {
  Rng rng(871);
  DTensor2 w = DTensor2::from_shape({128, 256});
  for (auto& v : w) v = rng.normal() * (rng.uniform() < 0.005 ? 10.0 : 1.0);
  DTensor2 x = DTensor2::from_shape({256, 64});  // the layer's inputs, for its output error
  for (auto& v : x) v = rng.normal();
  std::vector<std::vector<std::string>> rows;
  for (const auto& r : analysis::incoherence_table(w, {2, 3, 4, 8}, 7, x))
    rows.push_back({std::to_string(r.bits), fixed(r.direct, 3), fixed(r.rotated, 3), fixed(r.output_direct, 3),
                    fixed(r.output_rotated, 3)});
  // 2 bits: the best uniform 4-level grid, the ball of E8 points (1.97 bits) and QuIP#'s E8P, direct
  // and rotated: the weights' relative error and the layer's on 64 random inputs
  double mean_square = 0.0;
  for (double v : w) mean_square += v * v / static_cast<double>(w.size());
  std::vector<std::vector<std::string>> two_bits;
  for (const analysis::TwoBitRow& r : analysis::two_bit_comparison(w, x, 7))
    two_bits.push_back({r.code, fixed(r.bits, 2), fixed(std::sqrt(r.mse / mean_square), 3),
                        fixed(std::sqrt(r.mse_rotated / mean_square), 3), fixed(r.output_error, 3),
                        fixed(r.output_error_rotated, 3)});
  std::ostringstream md;
  md << "W [128, 256] ~ N(0, 1), 0.5% of it x 10: the largest entry is "
     << fixed(analysis::coherence(w), 1) << " times the root mean square, "
     << fixed(analysis::coherence(analysis::incoherent_rotation(w, 7, false)), 1)
     << " after the rotation. Relative error of symmetric rounding with one scale per row, of the weights and "
        "of the layer's output W x on 64 random x:\n\n"
     << markdown_table({"bits", "weights, direct", "weights, rotated (randomized Hadamard)", "output, direct", "output, rotated"},
                       rows)
     << "\nAt 2 bits, the best uniform grid (scale per row of least error) against codebooks on the E8 "
        "lattice: the ball of points of norm^2 <= 10 (scale per row of least error) and QuIP#'s E8P (one scale, "
        "rms(W) / 1.03), on the same weights and inputs:\n\n"
     << markdown_table({"2-bit code", "bits per weight", "weights, direct", "weights, rotated", "output, direct",
                        "output, rotated"},
                       two_bits);
  return md.str();
}

// PTQ against QAT on the linear-layer experiment (analysis::qat_experiment), at 4 and 2 bits.
std::string qat_markdown() {
  std::vector<std::vector<std::string>> rows;
  for (int bits : {4, 2}) {
    const analysis::QatResult r = analysis::qat_experiment(bits, 846);
    rows.push_back({std::to_string(bits), sci(r.float_error, 2), sci(r.ptq_error, 2), sci(r.qat_error, 2)});
  }
  return markdown_table({"bits", "float", "PTQ", "QAT"}, rows);
}

// Pruning at 50%: unstructured against 2:4 on the same Gaussian weights, measured on the output
// W x of random inputs; and what removing 24 of LLaMA-2 70B's 64 query heads (000 L287) removes.
std::string pruning_markdown() {
  Rng rng(845);
  const Tensor2 w = rng.normal_matrix(256, 256), xs = rng.normal_matrix(256, 64);  // 64 inputs, as columns
  auto output_error = [&](const Tensor2& pruned) {
    double err = 0.0, ref = 0.0;
    for (std::size_t i = 0; i < 256; ++i)
      for (std::size_t t = 0; t < 64; ++t) {
        double full = 0.0, cut = 0.0;
        for (std::size_t j = 0; j < 256; ++j) full += double(w(i, j)) * xs(j, t), cut += double(pruned(i, j)) * xs(j, t);
        err += (full - cut) * (full - cut);
        ref += full * full;
      }
    return std::sqrt(err / ref);
  };
  std::vector<std::vector<std::string>> rows = {
      {"magnitude, 50% anywhere", fixed(output_error(ref::magnitude_prune(w, 0.5)), 3)},
      {"2:4, the 2 largest of every 4", fixed(output_error(ref::densify(ref::prune_2_4(w))), 3)},
      {"magnitude, 25%", fixed(output_error(ref::magnitude_prune(w, 0.25)), 3)}};
  const analysis::DecoderShape llama = analysis::decoder_shape("llama-2-70b");
  const double per_head = 2.0 * static_cast<double>(llama.hidden_size * llama.head_dim * llama.num_hidden_layers);
  const double removed = 24.0 * per_head, total = static_cast<double>(analysis::decoder_parameters(llama).total());
  std::ostringstream md;
  md << "W [256, 256] ~ N(0, 1) pruned; relative error of W x over 64 random x:\n\n"
     << markdown_table({"pruning", "relative output error"}, rows)
     << "\nLLaMA-2 70B from 64 to 40 query heads per layer (000 L287): " << fixed(100.0 * 24.0 / 64.0, 1)
     << "% of the heads; their columns of Q and rows of O are " << fixed(removed / 1e9, 2) << " billion weights, "
     << fixed(100.0 * removed / total, 1) << "% of the model (its K and V, shared by groups of 8 heads, stay).\n";
  return md.str();
}

// ------------------------------------------------------------------ agreement

// Every non-reference backend's bytes and dequantized values against the reference's, per format.
std::vector<Agreement> agreements() {
  Rng rng(7);
  const Tensor2 x = rng.normal_matrix(16, 256, 0.0, 2.0);
  const auto& reference = reference_backend(quant::backends());
  std::vector<Agreement> out;
  for (const auto& b : quant::backends()) {
    if (b.kind == BackendKind::reference || !b.quantize) continue;
    for (GgmlType type : quantized_types()) {
      const QuantizedMatrix expected = reference.quantize(x, type), got = b.quantize(x, type);
      double differing = 0.0;
      for (std::size_t i = 0; i < got.bytes.size() && i < expected.bytes.size(); ++i)
        differing += got.bytes[i] != expected.bytes[i];
      differing += got.bytes.size() != expected.bytes.size();
      out.push_back({"quantize " + type_name(type) + " (bytes that differ)", b.name, "16 x 256, N(0, 4)", differing, 0.0});
      out.push_back({"dequantize " + type_name(type), b.name, "16 x 256, N(0, 4)",
                     max_abs_difference(b.dequantize(expected), reference.dequantize(expected)), 0.0});
      if ((type == GgmlType::q8_0 || type == GgmlType::q4_0) && b.quantized_gemv) {
        Tensor1 v = Tensor1::from_shape({x.shape()[1]});
        for (std::size_t j = 0; j < v.size(); ++j) v(j) = x(0, j);
        const Tensor1 y = b.quantized_gemv(expected, v), y_ref = reference.quantized_gemv(expected, v);
        double worst = 0.0;
        for (std::size_t r = 0; r < y.size(); ++r) worst = std::max(worst, std::fabs(double(y(r)) - y_ref(r)));
        out.push_back({"quantized_gemv " + type_name(type), b.name, "W 16 x 256, x = its first row", worst, 0.0});
      }
    }
  }
  return out;
}

std::string markdown() {
  std::ostringstream md;
  md << results_header(TVLAB_CHAPTER_NAME, "Quantization and compression");
  md << "## The documents' numbers\n\n" << checks_markdown(document_checks()) << '\n';
  md << "## Model sizes\n\n"
     << "From each model's config (weight matrices at the precision named, embedding, output layer and "
        "norms in FP16):\n\n"
     << model_size_markdown() << '\n';
  md << "## llama.cpp's quantization mixes\n\n"
     << "Every tensor at the type llama-quantize's rules give it (tensor bytes only, no metadata):\n\n"
     << llama_cpp_mix_markdown() << '\n';
  md << "## The block formats' error on the same data\n\n"
     << "256 x 1024 weights, N(0, 1), seed 808, and the same weights with 1% of them multiplied by 20:\n\n"
     << error_table() << '\n';
  md << "## Microscaling (MX) and the integer blocks\n\n"
     << "The same weights in OCP MX v1.0 formats (an E8M0 power-of-two scale per 32 elements) and NVIDIA's "
        "NVFP4:\n\n"
     << microscaling_table() << '\n';
  md << "## Affine quantization: bits, granularity, clipping\n\n"
     << "RMSE of symmetric quantization of the same weights, N(0, 1):\n\n"
     << affine_table(false) << "\nWith 1% of them multiplied by 20:\n\n"
     << affine_table(true) << '\n';
  md << "## Low rank and shared layers\n\n" << low_rank_markdown() << '\n';
  md << "## Outlier activations\n\n"
     << "Y = X W with X [64, 256] ~ N(0, 1) except 4 channels x 30, W [256, 256] ~ N(0, 1/256) (seed 850):\n\n"
     << outliers_markdown() << "\nWeight-only INT4 of the same layer, AWQ's search of its scale exponent:\n\n"
     << awq_markdown() << '\n';
  md << "## Incoherence processing\n\n" << incoherence_markdown() << '\n';
  md << "## PTQ and QAT\n\n"
     << "A linear layer [8, 32] fitted to y = W* x + noise with correlated inputs (seed 846); relative "
        "mean squared error on held-out data:\n\n"
     << qat_markdown() << '\n';
  md << "## Pruning\n\n" << pruning_markdown() << '\n';
  md << "## Reference vs optimized\n\n" << agreements_markdown(agreements());
  return md.str();
}

// ------------------------------------------------------------------ --step

std::string hex_bytes(const std::uint8_t* bytes, std::size_t count) {
  std::ostringstream out;
  for (std::size_t i = 0; i < count; ++i)
    out << std::hex << std::setw(2) << std::setfill('0') << static_cast<int>(bytes[i]) << (i + 1 < count ? " " : "");
  return out.str();
}

// Block 0 of row 0 through the format, in the reference's order.
void step_through(const Tensor2& x, GgmlType type) {
  const auto& ref = reference_backend(quant::backends());
  const std::size_t n = block_size(type);
  const bool k_quant = n == 256;
  Tensor2 block = xt::view(x, xt::range(0, 1), xt::range(0, static_cast<std::ptrdiff_t>(n)));
  print_step(std::cout, 1, "the " + std::to_string(n) + " weights of block 0 of row 0");
  print_matrix(std::cout, "x", block);
  double amax = 0.0, x_max = 0.0, lo = INFINITY, hi = -INFINITY;
  for (float v : block) {
    if (std::fabs(v) > amax) amax = std::fabs(v), x_max = v;
    lo = std::min(lo, static_cast<double>(v)), hi = std::max(hi, static_cast<double>(v));
  }
  const QuantizedMatrix q = ref.quantize(block, type);
  // where the block keeps its fp16 super-scale d: first, except in Q6_K and Q3_K, which end with it,
  // and Q2_K, which ends with d and dmin
  const std::size_t d_at = type == GgmlType::q6_K || type == GgmlType::q3_K ? block_bytes(type) - 2
                           : type == GgmlType::q2_K                         ? block_bytes(type) - 4
                                                                            : 0;
  const float d16 = read_fp16(q.bytes.data() + d_at);
  std::ostringstream scale;
  switch (type) {
    case GgmlType::q8_0: scale << "d = max|x| / 127 = " << fixed(amax, 4) << " / 127 = " << fixed(amax / 127.0, 6); break;
    case GgmlType::q4_0:
      scale << "d = x_max / -8 = " << fixed(x_max, 4) << " / -8 = " << fixed(x_max / -8.0, 6)
            << " (x_max: the element of largest magnitude, sign kept, becomes code 0)";
      break;
    case GgmlType::q5_0: scale << "d = x_max / -16 = " << fixed(x_max, 4) << " / -16 = " << fixed(x_max / -16.0, 6); break;
    case GgmlType::q4_1:
      scale << "m = min x = " << fixed(lo, 4) << ", d = (max x - m) / 15 = " << fixed((hi - lo) / 15.0, 6);
      break;
    case GgmlType::q5_1:
      scale << "m = min x = " << fixed(lo, 4) << ", d = (max x - m) / 31 = " << fixed((hi - lo) / 31.0, 6);
      break;
    case GgmlType::q4_K:
    case GgmlType::q5_K:
      scale << "8 sub-blocks of 32, each with a scale and a minimum fitted to it, stored in 6 bits as multiples of "
               "two fp16 super-scales d and dmin; codes 0.."
            << (type == GgmlType::q4_K ? 15 : 31);
      break;
    case GgmlType::q3_K:
      scale << "16 sub-blocks of 16, each with a symmetric scale fitted to it, stored in 6 bits as multiples of one "
               "fp16 super-scale d; codes -4..3 in 3 bits";
      break;
    case GgmlType::q2_K:
      scale << "16 sub-blocks of 16, each with a scale and a minimum fitted to it, stored in 4 bits as multiples of "
               "two fp16 super-scales d and dmin; codes 0..3";
      break;
    default:
      scale << "16 sub-blocks of 16, each with an int8 scale, stored as multiples of one fp16 super-scale d; codes "
               "-32..31 in 6 bits";
      break;
  }
  print_step(std::cout, 2, "the scale: " + scale.str());
  print_step(std::cout, 3, std::string(k_quant ? "the super-scale d" : "d") + " stored as fp16: " + fixed(d16, 6) +
                               " (bytes " + hex_bytes(q.bytes.data() + d_at, 2) + ", little-endian at byte " +
                               std::to_string(d_at) + ")" +
                               (k_quant ? "" : "; the codes use the float d, the values back use this one"));
  print_step(std::cout, 4, "the block's " + std::to_string(block_bytes(type)) + " bytes (" +
                               fixed(bits_per_weight(type), 2) + " bits per weight)");
  std::cout << "  " << hex_bytes(q.bytes.data(), std::min<std::size_t>(q.bytes.size(), 48))
            << (q.bytes.size() > 48 ? " ..." : "") << "\n";
  const Tensor2 back = ref.dequantize(q);
  print_step(std::cout, 5, "the values the block stands for, x^");
  print_matrix(std::cout, "x^", back);
  print_step(std::cout, 6, k_quant ? "the error x - x^ (each value the nearest on its sub-block's grid)"
                                   : "the error x - x^ (within half a step, d / 2, except at the clamp and for the fp16 d)");
  print_matrix(std::cout, "x - x^", Tensor2(block - back));
}

// The product's first term, row 0 against block 0 of x, then the row's sum, in the reference's order.
void step_through_gemv(const QuantizedMatrix& w, const Tensor1& x) {
  const bool k_quant = w.type == GgmlType::q4_K;
  const std::size_t n = block_size(w.type);
  const std::uint8_t* wb = w.row(0);
  print_step(std::cout, 1, "row 0's first block of W, " + type_name(w.type) + ": its " + std::to_string(n) +
                               " integer codes" + (k_quant ? " q (0..15), in 8 sub-blocks of 32" : ""));
  std::vector<int> w_codes(n);
  for (std::size_t l = 0; l < n; ++l) {
    if (!k_quant) {
      w_codes[l] = ref::block_code(w.type, wb, l);
      continue;
    }
    const std::uint8_t nibbles = wb[16 + 32 * (l / 64) + l % 32];
    w_codes[l] = (l / 32) % 2 == 0 ? nibbles & 0x0F : nibbles >> 4;
  }
  const auto print_codes = [](const std::vector<int>& codes, std::size_t count) {
    std::cout << "  ";
    for (std::size_t l = 0; l < count; ++l) std::cout << codes[l] << (l + 1 < count ? (l % 32 == 31 ? "\n  " : " ") : "\n");
  };
  print_codes(w_codes, std::min<std::size_t>(n, 64));
  if (n > 64) std::cout << "  ... (" << n - 64 << " more)\n";
  const std::vector<std::uint8_t> xq = k_quant ? ref::quantize_activations_q8_k(x) : ref::quantize_activations_q8_0(x);
  std::vector<int> x_codes(n);
  for (std::size_t l = 0; l < n; ++l) x_codes[l] = static_cast<std::int8_t>(xq[(k_quant ? 4 : 2) + l]);
  float d_x = 0.0f;
  if (k_quant) {
    std::uint32_t bits = 0;
    for (int i = 0; i < 4; ++i) bits |= static_cast<std::uint32_t>(xq[i]) << (8 * i);
    std::memcpy(&d_x, &bits, 4);
  } else {
    d_x = read_fp16(xq.data());
  }
  print_step(std::cout, 2, std::string("x's first ") + (k_quant ? "Q8_K super-block" : "Q8_0 block") + ": d_x = " +
                               fixed(d_x, 6) + (k_quant ? " (float32, x_max / -127)" : " (fp16, max|x| / 127)") +
                               ", int8 codes");
  print_codes(x_codes, std::min<std::size_t>(n, 64));
  if (n > 64) std::cout << "  ... (" << n - 64 << " more)\n";
  float term = 0.0f;
  if (!k_quant) {
    long long sumi = 0;
    for (std::size_t l = 0; l < n; ++l) sumi += static_cast<long long>(w_codes[l]) * x_codes[l];
    const float d_w = read_fp16(wb);
    print_step(std::cout, 3, "the integer dot sumi = sum_j w_j x_j = " + std::to_string(sumi) + " (exact)");
    term = w.type == GgmlType::q8_0 ? static_cast<float>(sumi) * (d_w * d_x) : static_cast<float>(sumi) * d_w * d_x;
    print_step(std::cout, 4, "the block's float term: sumi " +
                                 std::string(w.type == GgmlType::q8_0 ? "(d_w d_x)" : "d_w d_x") + " with d_w = " +
                                 fixed(d_w, 6) + ": " + fixed(term, 6));
  } else {
    long long scaled = 0, offsets = 0;
    std::ostringstream subs;
    for (std::size_t j = 0; j < 8; ++j) {
      int sc = 0, m = 0;
      ref::q4_k_scale_min(j, wb + 4, sc, m);
      long long dot = 0, x_sum = 0;
      for (std::size_t l = 32 * j; l < 32 * (j + 1); ++l) dot += static_cast<long long>(w_codes[l]) * x_codes[l], x_sum += x_codes[l];
      scaled += sc * dot;
      offsets += m * x_sum;
      subs << "  sub-block " << j << ": s = " << sc << ", m = " << m << ", sum q x = " << dot << ", sum x = " << x_sum << "\n";
    }
    print_step(std::cout, 3, "per sub-block: its 6-bit scale s and min m, the integer dot and the codes' sum");
    std::cout << subs.str();
    print_step(std::cout, 4, "S = sum_j s_j (sum q x) = " + std::to_string(scaled) + ", M = sum_j m_j (sum x) = " +
                                 std::to_string(offsets) + " (exact)");
    const float d = read_fp16(wb), dmin = read_fp16(wb + 2);
    const float plus = d * d_x * static_cast<float>(scaled), minus = dmin * d_x * static_cast<float>(offsets);
    term = plus - minus;
    print_step(std::cout, 5, "the two float terms: (d d_x) S = " + fixed(plus, 6) + " with d = " + fixed(d, 6) +
                                 ", (dmin d_x) M = " + fixed(minus, 6) + " with dmin = " + fixed(dmin, 6));
  }
  // the whole row, and what the codes stand for in double
  const Tensor1 y = ref::quantized_gemv(w, x);
  const Tensor2 w_hat = ref::dequantize(w);
  double dequantized = 0.0;
  for (std::size_t c = 0; c < w.cols; ++c) dequantized += static_cast<double>(w_hat(0, c)) * x(c);
  print_step(std::cout, k_quant ? 6 : 5, "row 0 adds its " + std::to_string(w.cols / n) + " blocks' terms in order: y_0 = " +
                                             fixed(y(0), 6) + " (the dequantized W times the float x, in double: " +
                                             fixed(dequantized, 6) + ")");
}

// ------------------------------------------------------------------ GGUF files

// The demonstration file: random weights [rows, cols] as F32 ("w.f32") and in every block format
// ("w.Q8_0", ...), with a few metadata pairs. Row 0 starts with blocks on rounding ties, where a
// quantizer that rounds half to even, or fuses a multiply and an add, gives other bytes than ggml:
// x = k + 1/2 with max|x| = 127 (Q8_0's d = 1), then x = k/2 with x_max = -8 (Q4_0's d = 1).
int write_demo_gguf(const Options& o, const GlobalOptions& g) {
  Rng rng(g.seed);
  Tensor2 w = rng.normal_matrix(static_cast<std::size_t>(o.rows), static_cast<std::size_t>(o.cols));
  for (std::size_t c = 0; c < 32 && w.shape()[1] >= 64; ++c) {
    w(0, c) = c == 0 ? 127.0f : static_cast<float>(c) - 15.5f;
    w(0, 32 + c) = c == 0 ? -8.0f : static_cast<float>(c % 16) * 0.5f - 3.5f;
  }
  ref::GgufFile file;
  file.metadata = {{"general.architecture", ref::GgufValue::of_string("tvlab-demo")},
                   {"general.name", ref::GgufValue::of_string("tvlab quant --write-gguf")},
                   {"tvlab.seed", ref::GgufValue::of_uint32(static_cast<std::uint32_t>(g.seed))}};
  file.tensors.push_back(ref::gguf_tensor("w.f32", w));
  const auto& reference = reference_backend(quant::backends());
  for (GgmlType type : quantized_types())  // the K-quants need rows of whole super-blocks of 256
    if (w.shape()[1] % block_size(type) == 0)
      file.tensors.push_back(ref::gguf_tensor("w." + type_name(type), reference.quantize(w, type)));
  ref::write_gguf(o.write_gguf, file);
  std::cout << "wrote " << o.write_gguf << ": " << file.tensors.size() << " tensors of " << o.rows << " x " << o.cols
            << " (F32 and every block format whose block divides " << o.cols << "), " << file.metadata.size()
            << " metadata pairs\n";
  return 0;
}

// Lists a GGUF file's metadata and tensors; with --dump, writes each tensor's values as .npy.
int list_gguf(const Options& o) {
  const ref::GgufFile file = ref::read_gguf(o.gguf);
  std::cout << o.gguf << ": GGUF version " << file.version << ", " << file.metadata.size() << " metadata pairs, "
            << file.tensors.size() << " tensors, alignment " << file.alignment() << "\n";
  for (const auto& [key, value] : file.metadata) std::cout << "  " << key << ": " << ref::describe(value) << "\n";
  Dump dump(o.dump);
  for (const ref::GgufTensor& t : file.tensors) {
    std::ostringstream dims;
    for (std::size_t d = 0; d < t.dims.size(); ++d) dims << (d ? " x " : "") << t.dims[d];
    std::cout << "  " << t.name << ": " << type_name(t.type) << ", [" << dims.str() << "], " << t.data.size()
              << " bytes, " << fixed(bits_per_weight(t.type), 1) << " bits per weight\n";
    if (dump.enabled()) dump.write(t.name, ref::gguf_tensor_values(t));
  }
  for (const std::string& f : dump.files()) std::cout << "  wrote " << f << "\n";
  return 0;
}

// --gemv: W [rows, cols] quantized by the reference, x [cols], y = W x by every backend, bit for bit.
int run_gemv(const Options& o, const GlobalOptions& g, GgmlType type) {
  require(type == GgmlType::q8_0 || type == GgmlType::q4_0 || type == GgmlType::q4_K, TVLAB_CHAPTER_NAME, "--type (",
          o.type, ") must be Q8_0, Q4_0 or Q4_K with --gemv");
  Rng rng(g.seed);
  const Tensor2 w_float = rng.normal_matrix(static_cast<std::size_t>(o.rows), static_cast<std::size_t>(o.cols));
  const Tensor2 x_row = rng.normal_matrix(1, static_cast<std::size_t>(o.cols));
  Tensor1 x = Tensor1::from_shape({x_row.size()});
  std::copy(x_row.begin(), x_row.end(), x.begin());
  const QuantizedMatrix w = reference_backend(quant::backends()).quantize(w_float, type);
  const auto run_one = [&](const quant::Backend& b) -> std::optional<Run> {
    if (!b.quantized_gemv) return std::nullopt;
    Run run;
    run.outputs.push_back({"y", b.quantized_gemv(w, x), 0.0, "y = W x: bit for bit"});
    return run;
  };
  const Run expected = *run_one(reference_backend(quant::backends()));
  if (o.step) step_through_gemv(w, x);
  Dump dump(o.dump);
  dump.write("w", w_float);
  dump.write("x", x);
  const RunReport report{TVLAB_CHAPTER_NAME, g.seed,
                         "y = W x, W in " + type_name(type) + ": rows " + std::to_string(o.rows) + ", cols " +
                             std::to_string(o.cols) + ", seed " + std::to_string(g.seed),
                         {{"rows", o.rows}, {"cols", o.cols}, {"type", type_name(type)}, {"gemv", "true"}},
                         g.format == "json"};
  return run_backends(quant::backends(), o.backend, run_one, expected, dump, report);
}

int run(const Options& o, const GlobalOptions& g) {
  if (g.format == "markdown") {
    std::cout << markdown();
    return 0;
  }
  if (!o.gguf.empty()) return list_gguf(o);
  require_positive(TVLAB_CHAPTER_NAME, "--rows", o.rows);
  require_positive(TVLAB_CHAPTER_NAME, "--cols", o.cols);
  const GgmlType type = type_from_name(TVLAB_CHAPTER_NAME, o.type);
  require(type != GgmlType::f32 && type != GgmlType::f16, TVLAB_CHAPTER_NAME, "--type (", o.type,
          ") must be a block type: Q8_0, Q5_1, Q5_0, Q4_1, Q4_0 or a K-quant, Q6_K to Q2_K");
  require_block_multiple(TVLAB_CHAPTER_NAME, "--cols", static_cast<std::size_t>(o.cols), type);
  const auto rows = static_cast<std::uint64_t>(o.rows), cols = static_cast<std::uint64_t>(o.cols);
  RunCost cost;
  cost.memory("the input and every backend's blocks and values back", {quant::backends().size() + 1, rows, cols},
              2 * sizeof(float), "--cols")
      .work("the loop reference's codes", {rows, cols}, "--cols");
  cost.require_affordable(g, o);
  if (!o.write_gguf.empty()) return write_demo_gguf(o, g);
  if (o.gemv) return run_gemv(o, g, type);
  Rng rng(g.seed);
  const Tensor2 x = rng.normal_matrix(static_cast<std::size_t>(o.rows), static_cast<std::size_t>(o.cols));
  const auto run_one = [&](const quant::Backend& b) -> std::optional<Run> {
    if (!b.quantize) return std::nullopt;
    const QuantizedMatrix q = b.quantize(x, type);
    Tensor1 bytes = Tensor1::from_shape({q.bytes.size()});
    for (std::size_t i = 0; i < q.bytes.size(); ++i) bytes(i) = q.bytes[i];
    Run run;
    run.outputs.push_back({"bytes", bytes, 0.0, "quantize: the bytes"});  // byte for byte
    run.outputs.push_back({"dequantize", b.dequantize(q), 0.0});          // bit for bit
    return run;
  };
  const Run expected = *run_one(reference_backend(quant::backends()));
  if (o.step) step_through(x, type);
  Dump dump(o.dump);
  dump.write("x", x);
  const RunReport report{TVLAB_CHAPTER_NAME, g.seed,
                         type_name(type) + ": rows " + std::to_string(o.rows) + ", cols " + std::to_string(o.cols) +
                             ", seed " + std::to_string(g.seed),
                         {{"rows", o.rows}, {"cols", o.cols}, {"type", type_name(type)}},
                         g.format == "json"};
  return run_backends(quant::backends(), o.backend, run_one, expected, dump, report);
}

}  // namespace

Chapter TVLAB_CHAPTER_ENTRY() {
  Chapter c;
  c.name = TVLAB_CHAPTER_NAME;
  c.alias = "quant";
  c.summary = "quantization: affine and calibrated, FP8 and MX, ggml's block formats byte for byte, GGUF files";
  c.add_subcommand = [](CommandLine& root, GlobalOptions& global) {
    auto o = std::make_shared<Options>();
    Command sub = add_chapter_command(
        root, global, TVLAB_CHAPTER_NAME, "quant", "Quantization: ggml's block formats, one block step by step", *o,
        "print one block through the format: scale, fp16 scale, bytes, values back, errors",
        "write x.npy, bytes_<backend>.npy and dequantize_<backend>.npy to DIR", backend_lines(quant::backends()),
        [o, &global] { return run(*o, global); });
    sub.option("--rows", o->rows, "rows of weights");
    sub.option("--cols", o->cols, "weights per row (a multiple of 32)");
    sub.option("--type", o->type,
               "Q8_0, Q5_1, Q5_0, Q4_1, Q4_0, Q6_K, Q5_K, Q4_K, Q3_K or Q2_K (the K-quants: --cols a multiple of 256)");
    sub.option("--gguf", o->gguf, "list the metadata and tensors of the GGUF FILE (with --dump DIR: each tensor's values as .npy)",
               ShowDefault::no);
    sub.flag("--gemv", o->gemv,
             "the quantized product y = W x (W in --type: Q8_0, Q4_0 or Q4_K; x quantized to Q8_0 or Q8_K) by every "
             "backend; with --step, its first block's integer dot and float terms");
    sub.option("--write-gguf", o->write_gguf,
               "write a GGUF FILE: the --rows x --cols weights as F32 and in every block format", ShowDefault::no);
  };
  c.tour = [](const GlobalOptions&) { return TourReport{agreements(), document_checks()}; };
  return c;
}

}  // namespace tvlab::cli
