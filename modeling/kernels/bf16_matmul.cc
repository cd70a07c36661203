// A bfloat16 matrix multiply on the CPU's bfloat16 units, for runtimes without oneDNN.
//
// TF 1.15's own bfloat16 MatMul converts both operands to float, multiplies in float and
// rounds back: slower than float32. BertBf16MatMul computes what TF 2's oneDNN kernel
// computes (bfloat16 operands, products summed in float, the result rounded to bfloat16,
// to nearest, ties to even) on the AMX tiles of the CPUs that have them, else on
// AVX512_BF16's dot products: op(a) [M, K] x op(b) [K, N], op a transpose or not, as
// tf.matmul's transpose_a and transpose_b.
//
// Both operands are first packed: a into rows of K padded to a multiple of 32, b into the
// pair-interleaved layout both units read (for each pair of rows k, k + 1 of op(b), its
// columns interleaved), in blocks of 16 columns. Each thread then computes strips of 32
// rows of the product, 32 columns at a time. On AMX: four 16 x 16 float accumulator
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
// product is then computed in float).
const std::string& Units() {
  static std::once_flag once;
  static std::string units;
  std::call_once(once, [] {
#ifdef BERT_AMX
    units = AskForTiles();
    if (units.empty()) units = "AMX_BF16";
#endif
#ifdef __AVX512BF16__
    if (units != "AMX_BF16") units = "AVX512_BF16";
#else
    if (units.empty())
      units = "the fused kernels were built without AMX or AVX512_BF16 (this CPU or compiler "
              "has neither)";
#endif
  });
  return units;
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
    OP_REQUIRES(ctx, a.dims() == 2 && b.dims() == 2,
                tensorflow::errors::InvalidArgument("BertBf16MatMul takes matrices, not ",
                                                    a.shape().DebugString(), " and ",
                                                    b.shape().DebugString()));
    const int64 m = a.dim_size(transpose_a_ ? 1 : 0), k = a.dim_size(transpose_a_ ? 0 : 1);
    const int64 n = b.dim_size(transpose_b_ ? 0 : 1);
    OP_REQUIRES(ctx, b.dim_size(transpose_b_ ? 1 : 0) == k,
                tensorflow::errors::InvalidArgument(
                    "BertBf16MatMul: op(a) is ", m, " x ", k, " but op(b) has ",
                    b.dim_size(transpose_b_ ? 1 : 0), " rows"));
    Tensor* out = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, TensorShape({m, n}), &out));
    if (m == 0 || n == 0) return;
    const E* x = reinterpret_cast<const E*>(a.flat<T>().data());
    const E* y = reinterpret_cast<const E*>(b.flat<T>().data());
    E* z = reinterpret_cast<E*>(out->flat<T>().data());
    const int64 a_cols = a.dim_size(1), b_cols = b.dim_size(1);
#ifdef BERT_PACKED
    const std::string& units = Units();
    if (units == "AMX_BF16" || units == "AVX512_BF16")
      return ComputePacked(ctx, x, y, z, m, k, n, a_cols, b_cols, units == "AMX_BF16");
#endif
    ComputeFloat(ctx, x, y, z, m, k, n, a_cols, b_cols);
  }

 private:
#ifdef BERT_PACKED
  // The product on AMX (amx) or AVX512_BF16.
  void ComputePacked(OpKernelContext* ctx, const E* x, const E* y, E* z, int64 m, int64 k,
                     int64 n, int64 a_cols, int64 b_cols, bool amx) {
    const int64 depth = RoundUp(std::max<int64>(k, 1), kDepth), width = RoundUp(n, kStrip);
    const int64 strips = (m + kStrip - 1) / kStrip;
    // b: 16 columns of op(b) per block, each block depth / 2 rows of 16 pairs (k, k + 1),
    // zeros past op(b)'s edges. b is read along its rows: a pair of rows of op(b) at a
    // time, or (transposed) a column of op(b), whose pairs are then adjacent.
    std::vector<uint16_t> pb(width * depth);
    const int64 full_blocks = n / 16;
    if (!transpose_b_) {
      Parallel(ctx, (k + 1) / 2, 4 * n, [&](int64 begin, int64 end) {
        for (int64 p = begin; p < end; ++p) {
          const E* r0 = y + 2 * p * b_cols;
          const bool odd = 2 * p + 1 < k;
          for (int64 blk = 0; blk * 16 < n; ++blk) {
            uint16_t* out = pb.data() + blk * 16 * depth + p * 32;
            if (odd && blk < full_blocks) {
              PairBits(r0 + blk * 16, r0 + b_cols + blk * 16, out);
              continue;
            }
            const int64 cols = blk < full_blocks ? 16 : n - blk * 16;
            for (int64 j = 0; j < cols; ++j) {
              out[2 * j] = BitsOf(r0, blk * 16 + j);
              out[2 * j + 1] = odd ? BitsOf(r0, b_cols + blk * 16 + j) : 0;
            }
          }
        }
      });
    } else {
      Parallel(ctx, (n + 15) / 16, 32 * k, [&](int64 begin, int64 end) {
        for (int64 blk = begin; blk < end; ++blk) {
          uint16_t* block = pb.data() + blk * 16 * depth;
          std::vector<uint16_t> column(k);
          for (int64 j = 0; j < 16 && blk * 16 + j < n; ++j) {
            RowBits(y + (blk * 16 + j) * b_cols, k, column.data());
            for (int64 row = 0; row < k; ++row)
              block[(row / 2) * 32 + 2 * j + (row & 1)] = column[row];
          }
        }
      });
    }
    // A bfloat16 a is read in place where its rows are op(a)'s and whole steps of K (one at
    // least); else
    // (and for the last, partial strip) each strip is first copied, zero padded. The
    // columns are taken `chunk` at a time, so that the part of b they read stays in the
    // core's cache across the thread's strips.
    const bool in_place =
        std::is_same<E, uint16_t>::value && !transpose_a_ && k > 0 && k % kDepth == 0;
    const int64 chunk = std::min(width, std::max<int64>(
        kStrip, kCacheBytes / (depth * int64(sizeof(uint16_t))) / kStrip * kStrip));
    Parallel(ctx, strips, 2 * kStrip * depth * width, [&](int64 begin, int64 end) {
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
      std::vector<int64> lda(end - begin, a_cols);
      std::vector<uint16_t> copies;
      for (int64 s = begin; s < end; ++s)
        if (!in_place || (s + 1) * kStrip > m) copies.resize(copies.size() + kStrip * depth);
      uint16_t* copy = copies.data();
      for (int64 s = begin; s < end; ++s) {
        const int64 first = s * kStrip, rows = std::min(kStrip, m - first);
        if (in_place && rows == kStrip) {
          rows_of[s - begin] = reinterpret_cast<const uint16_t*>(x) + first * a_cols;
          continue;
        }
        if (transpose_a_) {
          // (a strip of a's columns, transposed 32 x 32 at a time through `block`: writing
          // each of a row's values straight to the copy would write 32 lines `depth`
          // apart for each, lines that share the cache's sets when depth is a power of 2)
          uint16_t block[kStrip][kStrip];  // [a's row j0 + i][the strip's row r]
          for (int64 j0 = 0; j0 < k; j0 += kStrip) {
            const int64 count = std::min(kStrip, k - j0);
            for (int64 i = 0; i < count; ++i) RowBits(x + (j0 + i) * a_cols + first, rows, block[i]);
            for (int64 r = 0; r < rows; ++r)
              for (int64 i = 0; i < count; ++i) copy[r * depth + j0 + i] = block[i][r];
          }
        } else {
          for (int64 r = 0; r < rows; ++r) RowBits(x + (first + r) * a_cols, k, copy + r * depth);
        }
        rows_of[s - begin] = copy;
        lda[s - begin] = depth;
        copy += kStrip * depth;
      }
      std::vector<float> c(kStrip * chunk);
      for (int64 col = 0; col < width; col += chunk) {
        const int64 col_end = std::min(width, col + chunk), valid = std::min(n, col_end) - col;
        for (int64 s = begin; s < end; ++s) {
#ifdef BERT_AMX
          if (amx)
            AmxStrip(rows_of[s - begin], lda[s - begin], pb.data(), depth, col, col_end,
                     c.data());
#endif
#ifdef __AVX512BF16__
          if (!amx)
            AvxStrip(rows_of[s - begin], lda[s - begin], pb.data(), depth, col, col_end,
                     c.data());
#endif
          const int64 first = s * kStrip, rows = std::min(kStrip, m - first);
          for (int64 r = 0; r < rows; ++r)
            Store(&c[r * (col_end - col)], valid, z + (first + r) * n + col);
        }
      }
#ifdef BERT_AMX
      if (amx) _tile_release();
#endif
    });
  }
#endif

  // The same product in float (Eigen) of the same bfloat16 values, strips of rows per
  // thread.
  void ComputeFloat(OpKernelContext* ctx, const E* x, const E* y, E* z, int64 m, int64 k,
                    int64 n, int64 a_cols, int64 b_cols) {
    typedef Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor> Matrix;
    Matrix rhs(k, n);
    for (int64 r = 0; r < k; ++r)
      for (int64 j = 0; j < n; ++j) rhs(r, j) = BitsToFloat(At(y, transpose_b_, b_cols, r, j));
    const int64 strips = (m + kStrip - 1) / kStrip;
    Parallel(ctx, strips, 2 * kStrip * k * n, [&](int64 begin, int64 end) {
      const int64 first = begin * kStrip, rows = std::min(m, end * kStrip) - first;
      Matrix lhs(rows, k);
      for (int64 r = 0; r < rows; ++r)
        for (int64 j = 0; j < k; ++j)
          lhs(r, j) = BitsToFloat(At(x, transpose_a_, a_cols, first + r, j));
      Matrix product = lhs * rhs;
      for (int64 r = 0; r < rows; ++r) Store(&product(r, 0), n, z + (first + r) * n);
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
      tensorflow::shape_inference::ShapeHandle a, b;
      TF_RETURN_IF_ERROR(c->WithRank(c->input(0), 2, &a));
      TF_RETURN_IF_ERROR(c->WithRank(c->input(1), 2, &b));
      bool transpose_a, transpose_b;
      TF_RETURN_IF_ERROR(c->GetAttr("transpose_a", &transpose_a));
      TF_RETURN_IF_ERROR(c->GetAttr("transpose_b", &transpose_b));
      tensorflow::shape_inference::DimensionHandle unused;
      TF_RETURN_IF_ERROR(c->Merge(c->Dim(a, transpose_a ? 0 : 1),
                                  c->Dim(b, transpose_b ? 1 : 0), &unused));
      c->set_output(0, c->Matrix(c->Dim(a, transpose_a ? 1 : 0), c->Dim(b, transpose_b ? 0 : 1)));
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
    out->scalar<String>()() = Units();
  }
};

REGISTER_OP("BertBf16MatMulUnits")
    .Output("units: string")
    .SetShapeFn(tensorflow::shape_inference::ScalarShape);

REGISTER_KERNEL_BUILDER(Name("BertBf16MatMulUnits").Device(tensorflow::DEVICE_CPU),
                        Bf16MatMulUnits);

}  // namespace bert_bf16
