#include "mask_options.hpp"

#include <charconv>

#include "tvlab/core/error.hpp"

namespace tvlab::cli {

void add_mask_options(Command& command, MaskOptions& options) {
  command.flag("--causal", options.causal, "causal mask: query i sees keys j <= i' (i' its aligned position)");
  command.option("--causal-align", options.causal_align,
                 "where query i sits among the keys: top-left (i' = i, PyTorch's is_causal) or bottom-right "
                 "(i' = i + seq_k - seq_q, FlashAttention's and a KV cache's)");
  command.option("--window", options.window,
                 "sliding window: L (keys i' - L .. i') or L,R (keys i' - L .. i' + R), widths >= 0",
                 ShowDefault::no);
}

namespace {

// A width of --window: a whole number >= 0.
long long parse_width(const std::string& text, const std::string& whole) {
  long long value = -1;
  const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
  require(error == std::errc() && end == text.data() + text.size() && value >= 0, "--window", "('", whole,
          "') must be L or L,R with whole numbers >= 0");
  return value;
}

}  // namespace

AttentionMask attention_mask(const MaskOptions& options) {
  AttentionMask mask;
  mask.causal = options.causal;
  require(options.causal_align == "top-left" || options.causal_align == "bottom-right", "--causal-align", "('",
          options.causal_align, "') must be top-left or bottom-right");
  mask.causal_align = options.causal_align == "top-left" ? CausalAlign::top_left : CausalAlign::bottom_right;
  if (!options.window.empty()) {
    const auto comma = options.window.find(',');
    SlidingWindow w;
    w.left = parse_width(options.window.substr(0, comma), options.window);
    w.right = comma == std::string::npos ? 0 : parse_width(options.window.substr(comma + 1), options.window);
    mask.window = w;
  }
  return mask;
}

std::string describe(const AttentionMask& mask) {
  std::string text;
  const bool aligned = mask.causal || mask.window;
  if (mask.causal) text = "causal";
  if (mask.window)
    text += std::string(text.empty() ? "" : ", ") + "window " + std::to_string(mask.window->left) + " back and " +
            std::to_string(mask.window->right) + " ahead";
  if (aligned) text += mask.causal_align == CausalAlign::top_left ? " (top-left)" : " (bottom-right)";
  return text.empty() ? "no mask" : text;
}

}  // namespace tvlab::cli
