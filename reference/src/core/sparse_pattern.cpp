#include "tvlab/core/sparse_pattern.hpp"

#include <algorithm>
#include <limits>
#include <sstream>

#include "tvlab/core/attention_config.hpp"
#include "tvlab/core/error.hpp"
#include "tvlab/core/flash_config.hpp"

namespace tvlab {

bool SparsePattern::allows(std::size_t i, std::size_t j) const {
  const auto first = keys.begin() + static_cast<std::ptrdiff_t>(row_start[i]);
  const auto last = keys.begin() + static_cast<std::ptrdiff_t>(row_start[i + 1]);
  return std::binary_search(first, last, static_cast<std::uint32_t>(j));
}

Mask2 SparsePattern::to_mask() const {
  Mask2 mask = xt::zeros<bool>({seq_q, seq_k});
  for (std::size_t i = 0; i < seq_q; ++i)
    for (std::size_t e = row_start[i]; e < row_start[i + 1]; ++e) mask(i, keys[e]) = true;
  return mask;
}

SparsePattern pattern_from_mask(const Mask2& allowed) {
  SparsePattern p{.seq_q = allowed.shape(0), .seq_k = allowed.shape(1)};
  require(p.seq_k <= std::numeric_limits<std::uint32_t>::max(), "pattern_from_mask", "allowed has ", p.seq_k,
          " keys, more than 2^32 - 1");
  p.row_start.reserve(p.seq_q + 1);
  p.row_start.push_back(0);
  for (std::size_t i = 0; i < p.seq_q; ++i) {
    for (std::size_t j = 0; j < p.seq_k; ++j)
      if (allowed(i, j)) p.keys.push_back(static_cast<std::uint32_t>(j));
    p.row_start.push_back(p.keys.size());
  }
  return p;
}

const SparsePattern& pattern_of_head(const HeadPatterns& patterns, std::size_t h) {
  return patterns.size() == 1 ? patterns[0] : patterns.at(h);
}

void validate_pattern(const char* function, const char* parameter, const SparsePattern& p, std::size_t seq_q,
                      std::size_t seq_k) {
  require(p.seq_q == seq_q && p.seq_k == seq_k, function, parameter, " is a pattern of ", p.seq_q, " queries x ",
          p.seq_k, " keys, expected ", seq_q, " x ", seq_k);
  require(p.row_start.size() == seq_q + 1, function, parameter, ".row_start has ", p.row_start.size(),
          " offsets, expected seq_q + 1 = ", seq_q + 1);
  require(p.row_start.front() == 0 && p.row_start.back() == p.keys.size(), function, parameter,
          ".row_start must run from 0 to the number of keys (", p.keys.size(), "), got ", p.row_start.front(),
          " to ", p.row_start.back());
  // The offsets first: once they never decrease and end at keys.size(), every row's range lies
  // inside keys.
  for (std::size_t i = 0; i < seq_q; ++i)
    require(p.row_start[i] <= p.row_start[i + 1], function, parameter, ".row_start decreases at row ", i, " (",
            p.row_start[i], " then ", p.row_start[i + 1], ")");
  for (std::size_t i = 0; i < seq_q; ++i) {
    for (std::size_t e = p.row_start[i]; e < p.row_start[i + 1]; ++e) {
      require(p.keys[e] < seq_k, function, parameter, " row ", i, " names key ", p.keys[e], ", beyond seq_k = ",
              seq_k);
      require(e == p.row_start[i] || p.keys[e - 1] < p.keys[e], function, parameter, " row ", i,
              " must list its keys in increasing order without repeats (", p.keys[e - 1], " then ", p.keys[e],
              ")");
    }
  }
}

void validate_head_patterns(const char* function, const char* parameter, const HeadPatterns& patterns,
                            std::size_t heads, std::size_t seq_q, std::size_t seq_k) {
  require(patterns.size() == 1 || patterns.size() == heads, function, parameter, " holds ", patterns.size(),
          " patterns, expected 1 (shared by every head) or one per head (", heads, ")");
  for (const SparsePattern& p : patterns) validate_pattern(function, parameter, p, seq_q, seq_k);
}

void validate_head_layouts(const char* function, const char* parameter, const HeadLayouts& layouts,
                           std::size_t heads, std::size_t seq_q, std::size_t seq_k) {
  require(layouts.size() == 1 || layouts.size() == heads, function, parameter, " holds ", layouts.size(),
          " layouts, expected 1 (shared by every head) or one per head (", heads, ")");
  for (const BlockLayout& layout : layouts) validate_block_layout(function, parameter, layout, seq_q, seq_k);
}

void validate_sliding_window(const char* function, SlidingWindow window, std::size_t seq_q, std::size_t seq_k) {
  require(window.left >= 0, function, "window.left (", window.left, ") must be >= 0");
  require(window.right >= 0, function, "window.right (", window.right, ") must be >= 0");
  require(seq_q <= seq_k, function, "q has ", seq_q, " rows and k ", seq_k,
          ": the window places the queries at the last seq_q of the seq_k positions, so seq_q <= seq_k");
}

SparsePattern pattern_union(const std::vector<SparsePattern>& patterns) {
  const char* fn = "pattern_union";
  require(!patterns.empty(), fn, "patterns must hold at least one pattern");
  const std::size_t seq_q = patterns[0].seq_q, seq_k = patterns[0].seq_k;
  for (const SparsePattern& p : patterns) validate_pattern(fn, "patterns", p, seq_q, seq_k);
  SparsePattern u{.seq_q = seq_q, .seq_k = seq_k};
  u.row_start.push_back(0);
  std::vector<std::uint32_t> row;
  for (std::size_t i = 0; i < seq_q; ++i) {
    // S_i = union over m of A^(m)_i: gather, sort, drop repeats.
    row.clear();
    for (const SparsePattern& p : patterns)
      row.insert(row.end(), p.keys.begin() + static_cast<std::ptrdiff_t>(p.row_start[i]),
                 p.keys.begin() + static_cast<std::ptrdiff_t>(p.row_start[i + 1]));
    std::sort(row.begin(), row.end());
    row.erase(std::unique(row.begin(), row.end()), row.end());
    u.keys.insert(u.keys.end(), row.begin(), row.end());
    u.row_start.push_back(u.keys.size());
  }
  return u;
}

namespace {

// A tile's mask holds block_q * block_k bytes: both sizes positive and the product bounded (and
// computed without overflow).
constexpr std::size_t kMaxTileEntries = std::size_t{1} << 24;

void require_tile(const char* function, const char* block_q_name, std::size_t block_q, const char* block_k_name,
                  std::size_t block_k) {
  require(block_q > 0, function, block_q_name, " (", block_q, ") must be positive");
  require(block_k > 0, function, block_k_name, " (", block_k, ") must be positive");
  require(block_q <= kMaxTileEntries / block_k, function, block_q_name, " x ", block_k_name, " (", block_q, " x ",
          block_k, ") must be at most 2^24 entries: a partial block stores one byte per entry");
}

}  // namespace

BlockLayout to_block_layout(const SparsePattern& pattern, std::size_t block_q, std::size_t block_k) {
  require_tile("to_block_layout", "block_q", block_q, "block_k", block_k);
  validate_pattern("to_block_layout", "pattern", pattern, pattern.seq_q, pattern.seq_k);
  BlockLayout layout{.seq_q = pattern.seq_q, .seq_k = pattern.seq_k, .block_q = block_q, .block_k = block_k};
  const std::size_t tile = block_q * block_k;
  // Per query block: the key blocks it touches, each with its allowed-pair count and its mask
  // (only touched blocks get one, so a long sparse row costs what it attends to).
  std::vector<std::int64_t> slot(layout.key_block_count(), -1);
  std::vector<std::size_t> touched, count;
  std::vector<std::uint8_t> tile_masks;
  layout.block_start.push_back(0);
  for (std::size_t qb = 0; qb < layout.query_blocks(); ++qb) {
    const std::size_t row0 = qb * block_q, rows = std::min(block_q, pattern.seq_q - row0);
    for (std::size_t r = 0; r < rows; ++r)
      for (std::size_t e = pattern.row_start[row0 + r]; e < pattern.row_start[row0 + r + 1]; ++e) {
        const std::size_t j = pattern.keys[e], kb = j / block_k;
        if (slot[kb] < 0) {
          slot[kb] = static_cast<std::int64_t>(touched.size());
          touched.push_back(kb);
          count.push_back(0);
          tile_masks.resize(tile_masks.size() + tile, 0);
        }
        const std::size_t s = static_cast<std::size_t>(slot[kb]);
        tile_masks[s * tile + r * block_k + (j - kb * block_k)] = 1;
        ++count[s];
      }
    std::sort(touched.begin(), touched.end());
    for (std::size_t kb : touched) {
      const std::size_t s = static_cast<std::size_t>(slot[kb]);
      const std::size_t cols = std::min(block_k, pattern.seq_k - kb * block_k);
      layout.key_blocks.push_back(static_cast<std::uint32_t>(kb));
      // Full: every (row, key) of the block that lies inside the matrix is allowed.
      if (count[s] == rows * cols) {
        layout.partial.push_back(-1);
      } else {
        layout.partial.push_back(static_cast<std::int32_t>(layout.partial_blocks()));
        layout.masks.insert(layout.masks.end(), tile_masks.begin() + static_cast<std::ptrdiff_t>(s * tile),
                            tile_masks.begin() + static_cast<std::ptrdiff_t>((s + 1) * tile));
      }
    }
    for (std::size_t kb : touched) slot[kb] = -1;
    touched.clear();
    count.clear();
    tile_masks.clear();
    layout.block_start.push_back(layout.key_blocks.size());
  }
  return layout;
}

SparsePattern to_pattern(const BlockLayout& layout) {
  validate_block_layout("to_pattern", "layout", layout, layout.seq_q, layout.seq_k);
  SparsePattern p{.seq_q = layout.seq_q, .seq_k = layout.seq_k};
  p.row_start.push_back(0);
  for (std::size_t i = 0; i < layout.seq_q; ++i) {
    const std::size_t qb = i / layout.block_q, r = i - qb * layout.block_q;
    for (std::size_t b = layout.block_start[qb]; b < layout.block_start[qb + 1]; ++b) {
      const std::size_t k0 = std::size_t{layout.key_blocks[b]} * layout.block_k;
      const std::size_t cols = std::min(layout.block_k, layout.seq_k - k0);
      const std::uint8_t* mask = layout.partial[b] < 0 ? nullptr
                                                       : layout.masks.data() + static_cast<std::size_t>(layout.partial[b]) *
                                                                                   layout.block_q * layout.block_k +
                                                             r * layout.block_k;
      for (std::size_t c = 0; c < cols; ++c)
        if (mask == nullptr || mask[c] != 0) p.keys.push_back(static_cast<std::uint32_t>(k0 + c));
    }
    p.row_start.push_back(p.keys.size());
  }
  return p;
}

BlockLayout block_layout_from_blocks(std::size_t seq_q, std::size_t seq_k, std::size_t block_q, std::size_t block_k,
                                     const Mask2& blocks) {
  const char* fn = "block_layout_from_blocks";
  require_tile(fn, "block_q", block_q, "block_k", block_k);
  require(seq_k <= std::numeric_limits<std::uint32_t>::max(), fn, "seq_k (", seq_k, ") must be below 2^32");
  BlockLayout layout{.seq_q = seq_q, .seq_k = seq_k, .block_q = block_q, .block_k = block_k};
  require(blocks.shape(0) == layout.query_blocks() && blocks.shape(1) == layout.key_block_count(), fn,
          "blocks is [", blocks.shape(0), ", ", blocks.shape(1), "], expected [query blocks, key blocks] = [",
          layout.query_blocks(), ", ", layout.key_block_count(), "] for ", seq_q, " x ", seq_k, " in tiles of ",
          block_q, " x ", block_k);
  layout.block_start.push_back(0);
  for (std::size_t qb = 0; qb < layout.query_blocks(); ++qb) {
    for (std::size_t kb = 0; kb < layout.key_block_count(); ++kb)
      if (blocks(qb, kb)) {
        layout.key_blocks.push_back(static_cast<std::uint32_t>(kb));
        layout.partial.push_back(-1);
      }
    layout.block_start.push_back(layout.key_blocks.size());
  }
  return layout;
}

void validate_block_layout(const char* function, const char* parameter, const BlockLayout& layout,
                           std::size_t seq_q, std::size_t seq_k) {
  require(layout.block_q > 0 && layout.block_k > 0, function, parameter, ".block_q and .block_k must be positive, got ",
          layout.block_q, " and ", layout.block_k);
  require(layout.block_q <= kMaxTileEntries / layout.block_k, function, parameter, ".block_q x .block_k (",
          layout.block_q, " x ", layout.block_k, ") must be at most 2^24 entries");
  require(layout.seq_q == seq_q && layout.seq_k == seq_k, function, parameter, " is a layout of ", layout.seq_q,
          " queries x ", layout.seq_k, " keys, expected ", seq_q, " x ", seq_k);
  const std::size_t query_blocks = layout.query_blocks(), key_blocks = layout.key_block_count();
  require(layout.block_start.size() == query_blocks + 1, function, parameter, ".block_start has ",
          layout.block_start.size(), " offsets, expected one more than the ", query_blocks, " query blocks");
  require(layout.block_start.front() == 0 && layout.block_start.back() == layout.key_blocks.size(), function,
          parameter, ".block_start must run from 0 to the number of key blocks listed (", layout.key_blocks.size(),
          ")");
  require(layout.partial.size() == layout.key_blocks.size(), function, parameter, ".partial has ",
          layout.partial.size(), " entries, expected one per listed key block (", layout.key_blocks.size(), ")");
  const std::size_t tile = layout.block_q * layout.block_k;
  require(layout.masks.size() % tile == 0, function, parameter, ".masks holds ", layout.masks.size(),
          " bytes, not a whole number of block_q x block_k = ", tile, " masks");
  // The offsets first, so that every query block's range lies inside key_blocks.
  for (std::size_t qb = 0; qb < query_blocks; ++qb)
    require(layout.block_start[qb] <= layout.block_start[qb + 1], function, parameter,
            ".block_start decreases at query block ", qb, " (", layout.block_start[qb], " then ",
            layout.block_start[qb + 1], ")");
  for (std::size_t qb = 0; qb < query_blocks; ++qb) {
    for (std::size_t b = layout.block_start[qb]; b < layout.block_start[qb + 1]; ++b) {
      require(layout.key_blocks[b] < key_blocks, function, parameter, " query block ", qb, " names key block ",
              layout.key_blocks[b], ", beyond the ", key_blocks, " key blocks");
      require(b == layout.block_start[qb] || layout.key_blocks[b - 1] < layout.key_blocks[b], function, parameter,
              " query block ", qb, " must list its key blocks in increasing order without repeats");
      require(layout.partial[b] < static_cast<std::int64_t>(layout.partial_blocks()), function, parameter,
              ".partial names mask ", layout.partial[b], ", beyond the ", layout.partial_blocks(), " masks");
      require(layout.partial[b] >= -1, function, parameter, ".partial must be -1 (a full block) or a mask's index, got ",
              layout.partial[b]);
    }
  }
}

HeadLayouts to_block_layouts(const HeadPatterns& patterns, std::size_t block_q, std::size_t block_k) {
  HeadLayouts layouts;
  layouts.reserve(patterns.size());
  for (const SparsePattern& p : patterns) layouts.push_back(to_block_layout(p, block_q, block_k));
  return layouts;
}

const BlockLayout& layout_of_head(const HeadLayouts& layouts, std::size_t h) {
  return layouts.size() == 1 ? layouts[0] : layouts.at(h);
}

double validate_sparse_attention(const char* function, const Tensor3& q, const Tensor3& k, const Tensor3& v,
                                 const std::optional<double>& scale) {
  const double s = validate_attention(function, q, k, v, scale, AttentionMask{});
  require(q.shape()[2] <= kFlashMaxHeadDim, function, "head_dim (", q.shape()[2], ") must be <= ", kFlashMaxHeadDim);
  require(v.shape()[2] <= kFlashMaxHeadDim, function, "head_dim_v (", v.shape()[2], ") must be <= ", kFlashMaxHeadDim);
  return s;
}

std::string pattern_grid(const SparsePattern& pattern) {
  std::ostringstream out;
  if (pattern.seq_q > 64 || pattern.seq_k > 64) {
    out << pattern.seq_q << " x " << pattern.seq_k << " pattern, " << pattern.pairs() << " attended pairs of "
        << pattern.seq_q * pattern.seq_k << " (too large to draw)\n";
    return out.str();
  }
  for (std::size_t i = 0; i < pattern.seq_q; ++i) {
    std::string row(pattern.seq_k, '.');
    for (std::size_t e = pattern.row_start[i]; e < pattern.row_start[i + 1]; ++e) row[pattern.keys[e]] = '#';
    out << row << '\n';
  }
  return out.str();
}

}  // namespace tvlab
