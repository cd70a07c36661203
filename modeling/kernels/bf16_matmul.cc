// A bfloat16 matrix multiply on the CPU's bfloat16 units, for runtimes without oneDNN.
//
// TF 1.15's own bfloat16 MatMul converts both operands to float, multiplies in float and
// rounds back: slower than float32. BertBf16MatMul computes what TF 2's oneDNN kernel
// computes (bfloat16 operands, products summed in float, the result rounded to bfloat16,
// to nearest, ties to even) on the AMX tiles of the CPUs that have them, else on
// AVX512_BF16's dot products: op(a) [M, K] x op(b) [K, N], op a transpose or not, as
// tf.matmul's transpose_a and transpose_b; or a batch of such products, [..., M, K] x
// [..., K, N] with the same leading dimensions (the attention's, one per head).
//
// Both operands are first packed: a into rows of K padded to a multiple of 32, b into the
// pair-interleaved layout both units read (for each pair of rows k, k + 1 of op(b), its
// columns interleaved), in blocks of 16 columns. Each thread then computes strips of 32
// rows of the product, 32 columns at a time (of a batch, whole products per thread). On AMX: four 16 x 16 float accumulator
// tiles, two tiles of a and two of b per step of 32 along K. On AVX512_BF16: 12, 12 and
// then 8 rows of the strip at a time, two 16-float registers per row, each step along K
// one pair of a row's values broadcast against a pair of rows of the two column blocks.
// Padding is zeros, so it adds nothing.
//
// Where the library was built with neither (or AMX alone, and the kernel refuses this
// process the tile state), the same op multiplies the same bfloat16 values in float
// (Eigen) instead: the same result to float rounding, no faster than float32.
// BertBf16MatMulUnits says which.

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <mutex>
#include <string>
#include <type_traits>
#include <vector>

#include "Eigen/Core"
#include "tensorflow/core/framework/common_shape_fns.h"
#include "tensorflow/core/framework/op.h"
#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/framework/shape_inference.h"
#include "tensorflow/core/public/version.h"
#include "tensorflow/core/util/work_sharder.h"

#ifdef __AVX512BF16__
#include <immintrin.h>
#endif
#if defined(__AMX_TILE__) && defined(__AMX_BF16__) && defined(__linux__)
#define BERT_AMX 1
#include <immintrin.h>
#include <sys/syscall.h>
#include <unistd.h>
#endif
#if defined(BERT_AMX) || defined(__AVX512BF16__)
#define BERT_PACKED 1  // (a build with bfloat16 units: the operands are packed for them)
#endif

namespace bert_bf16 {

using tensorflow::OpKernel;
using tensorflow::OpKernelConstruction;
using tensorflow::OpKernelContext;
using tensorflow::Tensor;
using tensorflow::TensorShape;
using tensorflow::shape_inference::InferenceContext;
typedef tensorflow::int64 int64;
#if TF_MAJOR_VERSION >= 2
typedef tensorflow::tstring String;
#else
typedef std::string String;
#endif

const int64 kStrip = 32;  // rows (and columns) of the product per block: 2 x 2 tiles
const int64 kDepth = 32;  // bfloat16 values along K per tile step (64 bytes)
const int64 kCacheBytes = 256 << 10;  // of b, per block of columns (a core's L2 holds more)

inline float BitsToFloat(uint16_t bits) {
  const uint32_t word = static_cast<uint32_t>(bits) << 16;
  float value;
  std::memcpy(&value, &word, sizeof value);
  return value;
}

// Round to nearest, ties to even (a NaN stays a quiet NaN of its sign), as TF's Cast.
inline uint16_t FloatToBits(float value) {
  uint32_t word;
  std::memcpy(&word, &value, sizeof word);
  if ((word & 0x7FFFFFFFu) > 0x7F800000u) return static_cast<uint16_t>((word >> 16) | 0x0040u);
  word += 0x7FFFu + ((word >> 16) & 1u);
  return static_cast<uint16_t>(word >> 16);
}

// n floats rounded to bfloat16 (AVX512_BF16 rounds as FloatToBits, flushing denormals).
inline void RoundRow(const float* in, int64 n, uint16_t* out) {
  int64 j = 0;
#ifdef __AVX512BF16__
  for (; j + 16 <= n; j += 16)
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + j),
                        (__m256i)_mm512_cvtneps_pbh(_mm512_loadu_ps(in + j)));
#endif
  for (; j < n; ++j) out[j] = FloatToBits(in[j]);
}

inline int64 RoundUp(int64 n, int64 to) { return (n + to - 1) / to * to; }

template <typename Body>
void Parallel(OpKernelContext* ctx, int64 units, int64 cost_per_unit, Body body) {
  auto* threads = ctx->device()->tensorflow_cpu_worker_threads();
  tensorflow::Shard(threads->num_threads, threads->workers, units, cost_per_unit,
                    [&](int64 begin, int64 end) { body(begin, end); });
}

// The operands' elements as bfloat16 bits: a float rounds (to nearest, ties to even), and
// products are written back in the operands' type. E is float or uint16_t (bfloat16).
inline uint16_t BitsOf(const uint16_t* x, int64 i) { return x[i]; }
inline uint16_t BitsOf(const float* x, int64 i) { return FloatToBits(x[i]); }

// n elements from x as bfloat16 bits into out.
inline void RowBits(const uint16_t* x, int64 n, uint16_t* out) {
  std::memcpy(out, x, n * sizeof(uint16_t));
}
inline void RowBits(const float* x, int64 n, uint16_t* out) {
  int64 j = 0;
#ifdef __AVX512BF16__
  for (; j + 16 <= n; j += 16)
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + j),
                        (__m256i)_mm512_cvtneps_pbh(_mm512_loadu_ps(x + j)));
#endif
  for (; j < n; ++j) out[j] = FloatToBits(x[j]);
}

// Two rows' 16 elements each, interleaved (r0[0], r1[0], r0[1], ...) into out[32].
inline void PairBits(const uint16_t* r0, const uint16_t* r1, uint16_t* out) {
  for (int j = 0; j < 16; ++j) {
    out[2 * j] = r0[j];
    out[2 * j + 1] = r1[j];
  }
}
inline void PairBits(const float* r0, const float* r1, uint16_t* out) {
#ifdef __AVX512BF16__
  // (cvtne2ps puts its second operand's 16 values below its first's)
  const __m512i both = (__m512i)_mm512_cvtne2ps_pbh(_mm512_loadu_ps(r1), _mm512_loadu_ps(r0));
  const __m512i order = _mm512_set_epi16(31, 15, 30, 14, 29, 13, 28, 12, 27, 11, 26, 10, 25, 9,
                                         24, 8, 23, 7, 22, 6, 21, 5, 20, 4, 19, 3, 18, 2, 17,
                                         1, 16, 0);
  _mm512_storeu_si512(out, _mm512_permutexvar_epi16(order, both));
#else
  for (int j = 0; j < 16; ++j) {
    out[2 * j] = FloatToBits(r0[j]);
    out[2 * j + 1] = FloatToBits(r1[j]);
  }
#endif
}
inline void Store(const float* c, int64 n, uint16_t* out) { RoundRow(c, n, out); }
inline void Store(const float* c, int64 n, float* out) { std::memcpy(out, c, n * sizeof(float)); }

// Element (r, c) of op(x), x row-major with `cols` columns, as bfloat16 bits.
template <typename E>
inline uint16_t At(const E* x, bool transpose, int64 cols, int64 r, int64 c) {
  return BitsOf(x, transpose ? c * cols + r : r * cols + c);
}

// ---- AMX: whether this process may use the tiles, asked of the kernel once.

#ifdef BERT_AMX
const int kArchReqXcompPerm = 0x1023;  // arch_prctl: ask for an extended state component
const int kXfeatureXtiledata = 18;     // the AMX tile data

std::string AskForTiles() {
  if (syscall(SYS_arch_prctl, kArchReqXcompPerm, kXfeatureXtiledata) != 0)
    return "the kernel refused this process the AMX tile state (arch_prctl)";
  return "";
}

struct TileConfig {  // the layout _tile_loadconfig reads (palette 1)
  uint8_t palette_id = 1;
  uint8_t start_row = 0;
  uint8_t reserved[14] = {};
  uint16_t colsb[16] = {};
  uint8_t rows[16] = {};
};

// One strip of the product, columns [first, end) of it: a is kStrip rows of `depth`
// values, `lda` apart; b the packed b; c receives kStrip x (end - first) floats.
void AmxStrip(const uint16_t* a, int64 lda, const uint16_t* b, int64 depth, int64 first,
              int64 end, float* c) {
  const int64 width = end - first;
  // Tiles 0-3 accumulate c's 2 x 2 blocks, 4-5 hold a's two row blocks, 6-7 b's two
  // column blocks; each is 16 rows of 64 bytes.
  const int64 a_stride = lda * sizeof(uint16_t), c_stride = width * sizeof(float);
  for (int64 n = 0; n < width; n += kStrip) {
    const uint16_t* b0 = b + (first + n) * depth;  // column block: depth / 2 rows of 16 pairs
    const uint16_t* b1 = b0 + 16 * depth;
    _tile_zero(0);
    _tile_zero(1);
    _tile_zero(2);
    _tile_zero(3);
    for (int64 k = 0; k < depth; k += kDepth) {
      _tile_loadd(4, a + k, a_stride);
      _tile_loadd(5, a + 16 * lda + k, a_stride);
      _tile_loadd(6, b0 + k * 16, 64);
      _tile_loadd(7, b1 + k * 16, 64);
      _tile_dpbf16ps(0, 4, 6);
      _tile_dpbf16ps(1, 4, 7);
      _tile_dpbf16ps(2, 5, 6);
      _tile_dpbf16ps(3, 5, 7);
    }
    _tile_stored(0, c + n, c_stride);
    _tile_stored(1, c + n + 16, c_stride);
    _tile_stored(2, c + 16 * width + n, c_stride);
    _tile_stored(3, c + 16 * width + n + 16, c_stride);
  }
}
#endif

#ifdef __AVX512BF16__
// kRows rows of a (`lda` apart) times two packed column blocks b0, b1 (16 columns each)
// over `depth` values: kRows x 32 floats into c, rows `ldc` apart.
template <int kRows>
inline void DotRows(const uint16_t* a, int64 lda, const uint16_t* b0, const uint16_t* b1,
                    int64 depth, float* c, int64 ldc) {
  __m512 left[kRows], right[kRows];
  for (int r = 0; r < kRows; ++r) {
    left[r] = _mm512_setzero_ps();
    right[r] = _mm512_setzero_ps();
  }
  for (int64 k = 0; k < depth; k += 2) {
    const __m512bh x0 = (__m512bh)_mm512_loadu_si512(b0 + k * 16);
    const __m512bh x1 = (__m512bh)_mm512_loadu_si512(b1 + k * 16);
    for (int r = 0; r < kRows; ++r) {
      int32_t pair;  // (a's values k and k + 1 of row r)
      std::memcpy(&pair, a + r * lda + k, sizeof pair);
      const __m512bh both = (__m512bh)_mm512_set1_epi32(pair);
      left[r] = _mm512_dpbf16_ps(left[r], both, x0);
      right[r] = _mm512_dpbf16_ps(right[r], both, x1);
    }
  }
  for (int r = 0; r < kRows; ++r) {
    _mm512_storeu_ps(c + r * ldc, left[r]);
    _mm512_storeu_ps(c + r * ldc + 16, right[r]);
  }
}

// AmxStrip's product (the same arguments and result) on AVX512_BF16.
void AvxStrip(const uint16_t* a, int64 lda, const uint16_t* b, int64 depth, int64 first,
              int64 end, float* c) {
  const int64 width = end - first;
  for (int64 n = 0; n < width; n += kStrip) {
    const uint16_t* b0 = b + (first + n) * depth;
    const uint16_t* b1 = b0 + 16 * depth;
    DotRows<12>(a, lda, b0, b1, depth, c + n, width);
    DotRows<12>(a + 12 * lda, lda, b0, b1, depth, c + 12 * width + n, width);
    DotRows<8>(a + 24 * lda, lda, b0, b1, depth, c + 24 * width + n, width);
  }
}
#endif

// The units the product runs on here: "AMX_BF16", "AVX512_BF16", or why neither (the
// product is then computed in float); and the path that follows from them.
struct UnitsHere {
  std::string text;
  bool packed = false;  // (AMX_BF16 or AVX512_BF16: the operands are packed for them)
  bool amx = false;
};

const UnitsHere& Units() {
  static std::once_flag once;
  static UnitsHere units;
  std::call_once(once, [] {
#ifdef BERT_AMX
    units.text = AskForTiles();
    if (units.text.empty()) units.text = "AMX_BF16";
    units.amx = units.packed = units.text == "AMX_BF16";
#endif
#ifdef __AVX512BF16__
    if (!units.amx) units.text = "AVX512_BF16";
    units.packed = true;
#else
    if (units.text.empty())
      units.text = "the fused kernels were built without AMX or AVX512_BF16 (this CPU or "
                   "compiler has neither)";
#endif
  });
  return units;
}

// Shapes of the same rank (2 or more) whose leading dimensions (the batch) agree.
bool SameBatch(const TensorShape& a, const TensorShape& b) {
  if (a.dims() < 2 || a.dims() != b.dims()) return false;
  for (int d = 0; d + 2 < a.dims(); ++d)
    if (a.dim_size(d) != b.dim_size(d)) return false;
  return true;
}

// T is float or bfloat16, E its elements as this file handles them.
template <typename T>
class Bf16MatMul : public OpKernel {
  typedef typename std::conditional<std::is_same<T, float>::value, float, uint16_t>::type E;

 public:
  explicit Bf16MatMul(OpKernelConstruction* ctx) : OpKernel(ctx) {
    OP_REQUIRES_OK(ctx, ctx->GetAttr("transpose_a", &transpose_a_));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("transpose_b", &transpose_b_));
  }

  void Compute(OpKernelContext* ctx) override {
    const Tensor& a = ctx->input(0);
    const Tensor& b = ctx->input(1);
    OP_REQUIRES(ctx, SameBatch(a.shape(), b.shape()),
                tensorflow::errors::InvalidArgument(
                    "BertBf16MatMul takes two matrices, or two batches of them of one "
                    "shape, not ", a.shape().DebugString(), " and ", b.shape().DebugString()));
    const int rank = a.dims();
    const int64 a_rows = a.dim_size(rank - 2), a_cols = a.dim_size(rank - 1);
    const int64 b_rows = b.dim_size(rank - 2), b_cols = b.dim_size(rank - 1);
    const int64 m = transpose_a_ ? a_cols : a_rows, k = transpose_a_ ? a_rows : a_cols;
    const int64 n = transpose_b_ ? b_rows : b_cols;
    OP_REQUIRES(ctx, (transpose_b_ ? b_cols : b_rows) == k,
                tensorflow::errors::InvalidArgument(
                    "BertBf16MatMul: op(a) is ", m, " x ", k, " but op(b) has ",
                    transpose_b_ ? b_cols : b_rows, " rows"));
    TensorShape shape;
    for (int d = 0; d + 2 < rank; ++d) shape.AddDim(a.dim_size(d));
    const int64 batch = shape.num_elements();
    shape.AddDim(m);
    shape.AddDim(n);
    Tensor* out = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, shape, &out));
    if (batch == 0 || m == 0 || n == 0) return;
    Product p;
    p.x = reinterpret_cast<const E*>(a.flat<T>().data());
    p.y = reinterpret_cast<const E*>(b.flat<T>().data());
    p.z = reinterpret_cast<E*>(out->flat<T>().data());
    p.m = m;
    p.k = k;
    p.n = n;
    p.a_cols = a_cols;
    p.b_cols = b_cols;
#ifdef BERT_PACKED
    if (Units().packed) return ComputePacked(ctx, p, batch, Units().amx);
#endif
    ComputeFloat(ctx, p, batch);
  }

 private:
  // One product of the batch: op(x) [m, k] times op(y) [k, n] into z [m, n]; x and y
  // row-major with a_cols and b_cols columns.
  struct Product {
    const E* x;
    const E* y;
    E* z;
    int64 m, k, n, a_cols, b_cols;
  };

  // The batch's i-th product (each operand's matrices one after the other).
  static Product Nth(const Product& p, int64 i) {
    Product q = p;
    q.x += i * p.m * p.k;
    q.y += i * p.k * p.n;
    q.z += i * p.m * p.n;
    return q;
  }

#ifdef BERT_PACKED
  // The packed sizes: K to whole steps of kDepth (one at least), N to whole strips.
  static int64 Depth(const Product& p) { return RoundUp(std::max<int64>(p.k, 1), kDepth); }
  static int64 Width(const Product& p) { return RoundUp(p.n, kStrip); }

  // b into pb (Width x Depth values, zero where nothing is written): 16 columns of op(b)
  // per block, each block Depth / 2 rows of 16 pairs (k, k + 1), zeros past op(b)'s
  // edges. Not transposed, b is read a pair of its rows at a time: pairs [begin, end).
  void PackPairs(const Product& p, int64 begin, int64 end, uint16_t* pb) const {
    const int64 depth = Depth(p), full_blocks = p.n / 16;
    for (int64 pair = begin; pair < end; ++pair) {
      const E* r0 = p.y + 2 * pair * p.b_cols;
      const bool odd = 2 * pair + 1 < p.k;
      for (int64 blk = 0; blk * 16 < p.n; ++blk) {
        uint16_t* out = pb + blk * 16 * depth + pair * 32;
        if (odd && blk < full_blocks) {
          PairBits(r0 + blk * 16, r0 + p.b_cols + blk * 16, out);
          continue;
        }
        const int64 cols = blk < full_blocks ? 16 : p.n - blk * 16;
        for (int64 j = 0; j < cols; ++j) {
          out[2 * j] = BitsOf(r0, blk * 16 + j);
          out[2 * j + 1] = odd ? BitsOf(r0, p.b_cols + blk * 16 + j) : 0;
        }
      }
    }
  }

  // Transposed, each of b's rows is a column of op(b), whose pairs are then adjacent:
  // each pair is moved as one 32-bit word. Column blocks [begin, end); column: scratch of
  // k + 1 values (a zero after an odd k's last).
  void PackColumns(const Product& p, int64 begin, int64 end, uint16_t* pb,
                   uint16_t* column) const {
    const int64 depth = Depth(p), pairs = (p.k + 1) / 2;
    column[p.k] = 0;
    for (int64 blk = begin; blk < end; ++blk) {
      uint16_t* block = pb + blk * 16 * depth;
      for (int64 j = 0; j < 16 && blk * 16 + j < p.n; ++j) {
        RowBits(p.y + (blk * 16 + j) * p.b_cols, p.k, column);
        for (int64 pair = 0; pair < pairs; ++pair)
          std::memcpy(block + pair * 32 + 2 * j, column + 2 * pair, 2 * sizeof(uint16_t));
      }
    }
  }

  // Strips [begin, end) of 32 rows of the product, from the packed b. A bfloat16 a is read
  // in place where its rows are op(a)'s and whole steps of K (one step at least);
  // otherwise (and for the last, partial strip) each strip is first copied, zero padded.
  // The columns are taken `chunk` at a time, so that the part of b they read stays in the
  // core's cache across the strips.
  void Strips(const Product& p, const uint16_t* pb, bool amx, int64 begin, int64 end) const {
    const int64 depth = Depth(p), width = Width(p);
    const bool in_place =
        std::is_same<E, uint16_t>::value && !transpose_a_ && p.k > 0 && p.k % kDepth == 0;
    const int64 chunk = std::min(width, std::max<int64>(
        kStrip, kCacheBytes / (depth * int64(sizeof(uint16_t))) / kStrip * kStrip));
#ifdef BERT_AMX
    if (amx) {
      TileConfig config;
      for (int t = 0; t < 8; ++t) {
        config.rows[t] = 16;
        config.colsb[t] = 64;
      }
      _tile_loadconfig(&config);
    }
#endif
    std::vector<const uint16_t*> rows_of(end - begin);
    std::vector<int64> lda(end - begin, p.a_cols);
    std::vector<uint16_t> copies;
    for (int64 s = begin; s < end; ++s)
      if (!in_place || (s + 1) * kStrip > p.m) copies.resize(copies.size() + kStrip * depth);
    uint16_t* copy = copies.data();
    for (int64 s = begin; s < end; ++s) {
      const int64 first = s * kStrip, rows = std::min(kStrip, p.m - first);
      if (in_place && rows == kStrip) {
        rows_of[s - begin] = reinterpret_cast<const uint16_t*>(p.x) + first * p.a_cols;
        continue;
      }
      if (transpose_a_) {
        // (op(a)'s row r is a's column first + r: two of a's rows interleaved (PairBits)
        // give each of the strip's rows its pair of values as one 32-bit word. The words
        // of 32 of a's rows are gathered in `block` and each of the strip's rows written
        // whole: writing each word straight to the copy would write 32 lines `depth`
        // apart for each pair, lines that share the cache's sets when depth is a power
        // of 2)
        uint32_t block[kStrip][kStrip / 2];  // [the strip's row r][pair q of a's rows]
        uint16_t pair_bits[32];
        for (int64 j0 = 0; j0 < p.k; j0 += kStrip) {
          const int64 count = std::min(kStrip, p.k - j0), pairs = (count + 1) / 2;
          for (int64 q = 0; q < pairs; ++q) {
            const E* r0 = p.x + (j0 + 2 * q) * p.a_cols + first;
            const bool second = j0 + 2 * q + 1 < p.k;  // (else the pair's second is 0)
            for (int64 c0 = 0; c0 < rows; c0 += 16) {
              const int64 cols = std::min<int64>(16, rows - c0);
              if (second && cols == 16) {
                PairBits(r0 + c0, r0 + p.a_cols + c0, pair_bits);
              } else {
                for (int64 c = 0; c < cols; ++c) {
                  pair_bits[2 * c] = BitsOf(r0, c0 + c);
                  pair_bits[2 * c + 1] = second ? BitsOf(r0, p.a_cols + c0 + c) : 0;
                }
              }
              for (int64 c = 0; c < cols; ++c)
                std::memcpy(&block[c0 + c][q], pair_bits + 2 * c, sizeof(uint32_t));
            }
          }
          for (int64 r = 0; r < rows; ++r)
            std::memcpy(copy + r * depth + j0, block[r], pairs * sizeof(uint32_t));
        }
      } else {
        for (int64 r = 0; r < rows; ++r)
          RowBits(p.x + (first + r) * p.a_cols, p.k, copy + r * depth);
      }
      rows_of[s - begin] = copy;
      lda[s - begin] = depth;
      copy += kStrip * depth;
    }
    std::vector<float> c(kStrip * chunk);
    for (int64 col = 0; col < width; col += chunk) {
      const int64 col_end = std::min(width, col + chunk), valid = std::min(p.n, col_end) - col;
      for (int64 s = begin; s < end; ++s) {
#ifdef BERT_AMX
        if (amx) AmxStrip(rows_of[s - begin], lda[s - begin], pb, depth, col, col_end, c.data());
#endif
#ifdef __AVX512BF16__
        if (!amx) AvxStrip(rows_of[s - begin], lda[s - begin], pb, depth, col, col_end, c.data());
#endif
        const int64 first = s * kStrip, rows = std::min(kStrip, p.m - first);
        for (int64 r = 0; r < rows; ++r)
          Store(&c[r * (col_end - col)], valid, p.z + (first + r) * p.n + col);
      }
    }
#ifdef BERT_AMX
    if (amx) _tile_release();
#endif
  }

  // The product on AMX (amx) or AVX512_BF16. One matrix: b is packed by all threads, then
  // the threads share its strips. A batch: each thread takes whole products of it (the
  // attention's small matrices, many of them).
  void ComputePacked(OpKernelContext* ctx, const Product& p, int64 batch, bool amx) {
    const int64 size = Width(p) * Depth(p), strips = (p.m + kStrip - 1) / kStrip;
    const int64 pairs = (p.k + 1) / 2, blocks = (p.n + 15) / 16;
    if (batch == 1) {
      std::vector<uint16_t> pb(size);
      if (!transpose_b_) {
        Parallel(ctx, pairs, 4 * p.n, [&](int64 begin, int64 end) {
          PackPairs(p, begin, end, pb.data());
        });
      } else {
        Parallel(ctx, blocks, 32 * p.k, [&](int64 begin, int64 end) {
          std::vector<uint16_t> column(p.k + 1);
          PackColumns(p, begin, end, pb.data(), column.data());
        });
      }
      Parallel(ctx, strips, 2 * kStrip * Depth(p) * Width(p), [&](int64 begin, int64 end) {
        Strips(p, pb.data(), amx, begin, end);
      });
      return;
    }
    Parallel(ctx, batch, 2 * size * (1 + strips * kStrip), [&](int64 begin, int64 end) {
      // (every product of the batch writes the same places of pb, so the zeros of its
      // padding, written once, stay)
      std::vector<uint16_t> pb(size), column(p.k + 1);
      for (int64 i = begin; i < end; ++i) {
        const Product q = Nth(p, i);
        if (!transpose_b_)
          PackPairs(q, 0, pairs, pb.data());
        else
          PackColumns(q, 0, blocks, pb.data(), column.data());
        Strips(q, pb.data(), amx, 0, strips);
      }
    });
  }
#endif

  typedef Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor> Matrix;

  // op(b) of one product as floats of its bfloat16 values.
  Matrix FloatB(const Product& p) const {
    Matrix rhs(p.k, p.n);
    for (int64 r = 0; r < p.k; ++r)
      for (int64 j = 0; j < p.n; ++j)
        rhs(r, j) = BitsToFloat(At(p.y, transpose_b_, p.b_cols, r, j));
    return rhs;
  }

  // Rows [first, first + rows) of one product, in float (Eigen) of the bfloat16 values.
  void FloatRows(const Product& p, const Matrix& rhs, int64 first, int64 rows) const {
    Matrix lhs(rows, p.k);
    for (int64 r = 0; r < rows; ++r)
      for (int64 j = 0; j < p.k; ++j)
        lhs(r, j) = BitsToFloat(At(p.x, transpose_a_, p.a_cols, first + r, j));
    Matrix product = lhs * rhs;
    for (int64 r = 0; r < rows; ++r) Store(&product(r, 0), p.n, p.z + (first + r) * p.n);
  }

  // The same product in float: one matrix in strips of rows per thread, a batch in whole
  // products per thread.
  void ComputeFloat(OpKernelContext* ctx, const Product& p, int64 batch) {
    if (batch == 1) {
      const Matrix rhs = FloatB(p);
      const int64 strips = (p.m + kStrip - 1) / kStrip;
      Parallel(ctx, strips, 2 * kStrip * p.k * p.n, [&](int64 begin, int64 end) {
        const int64 first = begin * kStrip;
        FloatRows(p, rhs, first, std::min(p.m, end * kStrip) - first);
      });
      return;
    }
    Parallel(ctx, batch, 2 * p.m * p.k * p.n, [&](int64 begin, int64 end) {
      for (int64 i = begin; i < end; ++i) {
        const Product q = Nth(p, i);
        FloatRows(q, FloatB(q), 0, p.m);
      }
    });
  }

  bool transpose_a_, transpose_b_;
};

REGISTER_OP("BertBf16MatMul")
    .Input("a: T")
    .Input("b: T")
    .Output("product: T")
    .Attr("T: {float, bfloat16} = DT_FLOAT")
    .Attr("transpose_a: bool = false")
    .Attr("transpose_b: bool = false")
    .SetShapeFn([](InferenceContext* c) {
      // (two matrices, or two batches of them: the leading dimensions agree)
      tensorflow::shape_inference::ShapeHandle a, b, a_batch, b_batch, batch, product;
      TF_RETURN_IF_ERROR(c->WithRankAtLeast(c->input(0), 2, &a));
      TF_RETURN_IF_ERROR(c->WithRankAtLeast(c->input(1), 2, &b));
      if (c->RankKnown(a) && c->RankKnown(b) && c->Rank(a) != c->Rank(b))
        return tensorflow::errors::InvalidArgument(
            "BertBf16MatMul takes operands of one rank, not ", c->Rank(a), " and ", c->Rank(b));
      bool transpose_a, transpose_b;
      TF_RETURN_IF_ERROR(c->GetAttr("transpose_a", &transpose_a));
      TF_RETURN_IF_ERROR(c->GetAttr("transpose_b", &transpose_b));
      if (!c->RankKnown(a) || !c->RankKnown(b)) {
        c->set_output(0, c->UnknownShape());
        return tensorflow::Status();
      }
      const int rank = c->Rank(a);
      TF_RETURN_IF_ERROR(c->Subshape(a, 0, rank - 2, &a_batch));
      TF_RETURN_IF_ERROR(c->Subshape(b, 0, rank - 2, &b_batch));
      TF_RETURN_IF_ERROR(c->Merge(a_batch, b_batch, &batch));
      tensorflow::shape_inference::DimensionHandle unused;
      TF_RETURN_IF_ERROR(c->Merge(c->Dim(a, transpose_a ? rank - 2 : rank - 1),
                                  c->Dim(b, transpose_b ? rank - 1 : rank - 2), &unused));
      TF_RETURN_IF_ERROR(c->Concatenate(
          batch, c->Matrix(c->Dim(a, transpose_a ? rank - 1 : rank - 2),
                           c->Dim(b, transpose_b ? rank - 2 : rank - 1)), &product));
      c->set_output(0, product);
      return tensorflow::Status();
    });

REGISTER_KERNEL_BUILDER(
    Name("BertBf16MatMul").Device(tensorflow::DEVICE_CPU).TypeConstraint<float>("T"),
    Bf16MatMul<float>);
REGISTER_KERNEL_BUILDER(
    Name("BertBf16MatMul").Device(tensorflow::DEVICE_CPU).TypeConstraint<tensorflow::bfloat16>("T"),
    Bf16MatMul<tensorflow::bfloat16>);

class Bf16MatMulUnits : public OpKernel {
 public:
  explicit Bf16MatMulUnits(OpKernelConstruction* ctx) : OpKernel(ctx) {}
  void Compute(OpKernelContext* ctx) override {
    Tensor* out = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, TensorShape({}), &out));
    out->scalar<String>()() = Units().text;
  }
};

REGISTER_OP("BertBf16MatMulUnits")
    .Output("units: string")
    .SetShapeFn(tensorflow::shape_inference::ScalarShape);

REGISTER_KERNEL_BUILDER(Name("BertBf16MatMulUnits").Device(tensorflow::DEVICE_CPU),
                        Bf16MatMulUnits);

}  // namespace bert_bf16
