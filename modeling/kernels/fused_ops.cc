// Fused CPU kernels for the BERT encoder's elementwise work, forward and backward.
//
// TensorFlow's graph executor runs each elementwise op as its own pass over memory:
// the tanh GELU is about ten ops forward and a dozen backward, dropout five, layer norm
// and the attention softmax several each. These kernels do each group in one pass per
// direction, row by row, with Eigen's vectorised tanh and exp (the ones TensorFlow's own
// kernels use). modeling/fused.py builds this file for the running TensorFlow, loads it
// and registers the gradients; modeling/bert.py uses it on the CPU when asked.
//
// Dropout here draws no random numbers from TensorFlow: whether element i is kept is a
// hash of (seed, step, site, i), so the backward pass recomputes the mask instead of
// storing it, and a resumed run draws the masks an uninterrupted one would have drawn.
//
// Activations (T) are float or bfloat16: in bfloat16 the matrix multiplies around these
// kernels run in bfloat16 (a CPU's AMX or AVX512_BF16 units), while every kernel reads its
// rows into float, computes in float, and rounds only what it writes back as T (to
// nearest, ties to even, as TensorFlow's Cast). Parameters (bias, gamma, beta), their
// gradients, and what a backward pass reads of the forward pass's statistics stay float.
//
// BertAdamWeightDecay is the optimizer's update of one float variable and its two Adam
// slots in one pass: the clipped gradient, the weight decay and Adam's moments and step,
// instead of a scaled copy of the gradient, a decayed copy of the variable and
// TensorFlow's Adam kernel.

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <type_traits>
#include <vector>

#include "Eigen/Core"
#include "tensorflow/core/common_runtime/dma_helper.h"
#include "tensorflow/core/framework/op.h"
#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/framework/resource_mgr.h"
#include "tensorflow/core/framework/resource_var.h"
#include "tensorflow/core/framework/shape_inference.h"
#include "tensorflow/core/util/work_sharder.h"

namespace bert_fused {

using tensorflow::OpKernel;
using tensorflow::OpKernelConstruction;
using tensorflow::OpKernelContext;
using tensorflow::Status;
using tensorflow::Tensor;
using tensorflow::TensorShape;
using tensorflow::shape_inference::InferenceContext;
typedef tensorflow::int64 int64;
typedef Eigen::Array<float, Eigen::Dynamic, 1> Row;
typedef Eigen::Map<Row> RowOut;
typedef Eigen::Map<const Row> RowIn;
using tensorflow::bfloat16;

// ---- Rows of an activation type T read as float, and float rows written back as T.

inline float BitsToFloat(uint16_t bits) {
  const uint32_t word = static_cast<uint32_t>(bits) << 16;
  float value;
  std::memcpy(&value, &word, sizeof value);
  return value;
}

// Round to nearest, ties to even (a NaN stays a quiet NaN of its sign).
inline uint16_t FloatToBits(float value) {
  uint32_t word;
  std::memcpy(&word, &value, sizeof word);
  if ((word & 0x7FFFFFFFu) > 0x7F800000u) return static_cast<uint16_t>((word >> 16) | 0x0040u);
  word += 0x7FFFu + ((word >> 16) & 1u);
  return static_cast<uint16_t>(word >> 16);
}

// Rows<T> gives a kernel float rows of a tensor of T: Read(p, n) the n values at p, and
// Target(p, n) where to write n values bound for p, which Commit(p, n) then stores. For
// float both are the tensor's own memory; for bfloat16 a buffer of the object's, so each
// input or output read or written at once needs its own Rows.
template <typename T>
class Rows;

template <>
class Rows<float> {
 public:
  explicit Rows(int64) {}
  RowIn Read(const float* p, int64 n) { return RowIn(p, n); }
  RowOut Target(float* p, int64 n) { return RowOut(p, n); }
  void Commit(float*, int64) {}
};

template <>
class Rows<bfloat16> {
 public:
  explicit Rows(int64 width) : buffer_(width) {}
  RowIn Read(const bfloat16* p, int64 n) {
    Fit(n);
    const uint16_t* bits = reinterpret_cast<const uint16_t*>(p);
    float* out = buffer_.data();
    for (int64 j = 0; j < n; ++j) out[j] = BitsToFloat(bits[j]);
    return RowIn(out, n);
  }
  RowOut Target(bfloat16*, int64 n) {
    Fit(n);
    return RowOut(buffer_.data(), n);
  }
  void Commit(bfloat16* p, int64 n) {
    uint16_t* bits = reinterpret_cast<uint16_t*>(p);
    const float* in = buffer_.data();
    for (int64 j = 0; j < n; ++j) bits[j] = FloatToBits(in[j]);
  }

 private:
  void Fit(int64 n) {
    if (buffer_.size() < n) buffer_.resize(n);
  }
  Row buffer_;
};

// The kernels' type attribute, and a kernel registered for both types.
#define BERT_ACTIVATION_TYPE "T: {float, bfloat16} = DT_FLOAT"
#define BERT_REGISTER(NAME, KERNEL)                                                     \
  REGISTER_KERNEL_BUILDER(                                                              \
      Name(NAME).Device(tensorflow::DEVICE_CPU).TypeConstraint<float>("T"), KERNEL<float>); \
  REGISTER_KERNEL_BUILDER(                                                              \
      Name(NAME).Device(tensorflow::DEVICE_CPU).TypeConstraint<bfloat16>("T"),           \
      KERNEL<bfloat16>)

const float kGeluScale = 0.7978845608028654f;  // sqrt(2 / pi)
const float kGeluCubic = 0.044715f;

// ---- Dropout masks from a counter-based hash (splitmix64's finaliser).

inline uint64_t Mix(uint64_t z) {
  z += 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

class Dropout {
 public:
  // seed: [2] int64 (the run's seed, the global step); site tells apart the dropouts
  // of one step. Element i is kept with probability 1 - rate (to 2^-24).
  Dropout(const Tensor& seed, float rate, int64 site) : rate_(rate) {
    auto s = seed.flat<tensorflow::int64>();
    key_ = Mix(Mix(Mix(static_cast<uint64_t>(s(0))) ^ static_cast<uint64_t>(s(1))) ^
               static_cast<uint64_t>(site));
    threshold_ = static_cast<uint32_t>(std::lround(static_cast<double>(rate) * (1 << 24)));
    scale_ = rate > 0.f ? 1.f / (1.f - rate) : 1.f;
  }
  bool active() const { return rate_ > 0.f; }
  // out[j] = scale or 0 for elements first .. first + n - 1.
  void Multipliers(uint64_t first, int64 n, float* __restrict__ out) const {
    // (Locals, so that the compiler knows `out` cannot change them and vectorises.)
    const uint64_t start = key_ + first;
    const uint32_t threshold = threshold_;
    const float scale = scale_;
    for (int64 j = 0; j < n; ++j) {
      const uint32_t draw = static_cast<uint32_t>(Mix(start + j) >> 40);
      out[j] = draw >= threshold ? scale : 0.f;
    }
  }

 private:
  float rate_, scale_;
  uint64_t key_;
  uint32_t threshold_;
};

// ---- Work split over the CPU's threads.

template <typename Body>
void ForRows(OpKernelContext* ctx, int64 rows, int64 cost_per_row, Body body) {
  auto* threads = ctx->device()->tensorflow_cpu_worker_threads();
  tensorflow::Shard(threads->num_threads, threads->workers, rows, cost_per_row,
                    [&](int64 begin, int64 end) { body(begin, end); });
}

// Column sums over rows, with one partial sum per block of rows so that threads never
// share an accumulator: body(begin, end, partial) adds its rows into partial, which has
// `width` columns per sum and `sums` sums. Returns the totals, sums x width.
template <typename Body>
std::vector<double> ForRowBlocks(OpKernelContext* ctx, int64 rows, int64 cost_per_row,
                                 int64 sums, int64 width, Body body) {
  auto* threads = ctx->device()->tensorflow_cpu_worker_threads();
  const int64 blocks = std::max<int64>(1, std::min<int64>(rows, 4 * threads->num_threads));
  const int64 per_block = (rows + blocks - 1) / blocks;
  std::vector<Row> partials(blocks, Row::Zero(sums * width));
  tensorflow::Shard(threads->num_threads, threads->workers, blocks, per_block * cost_per_row,
                    [&](int64 first_block, int64 end_block) {
                      for (int64 b = first_block; b < end_block; ++b) {
                        const int64 begin = b * per_block;
                        const int64 end = std::min(rows, begin + per_block);
                        if (begin < end) body(begin, end, partials[b].data());
                      }
                    });
  std::vector<double> totals(sums * width, 0.0);
  for (const Row& partial : partials)
    for (int64 j = 0; j < sums * width; ++j) totals[j] += partial(j);
  return totals;
}

Status MatrixShapes(InferenceContext* c) {
  for (int i = 0; i < c->num_outputs(); ++i) c->set_output(i, c->input(0));
  return Status();
}

// The seed input of every op with dropout: [2] int64 (the run's seed, the step).
bool SeedIsPair(OpKernelContext* ctx, int index) {
  if (ctx->input(index).NumElements() == 2) return true;
  ctx->CtxFailure(__FILE__, __LINE__, tensorflow::errors::InvalidArgument(
                                          "the dropout seed must hold 2 values"));
  return false;
}

// ---- GELU (tanh form) of x + bias, as Google's BERT computes it.

// 0.5 (1 + tanh(u)) with u = sqrt(2 / pi) (x + 0.044715 x^3), written as the equal
// 1 / (1 + exp(-2u)): Eigen vectorises exp on both runtimes' headers, and tanh only on
// TF 2.15's. exp(-2u) overflows to inf for very negative u, giving the right 0.
inline Row GeluGate(const Row& x) {
  return 1.f / (1.f + (-2.f * kGeluScale * (x + kGeluCubic * x * x * x)).exp());
}

REGISTER_OP("BertBiasGelu")
    .Attr(BERT_ACTIVATION_TYPE)
    .Input("x: T")
    .Input("bias: float")
    .Output("y: T")
    .SetShapeFn(MatrixShapes);

REGISTER_OP("BertBiasGeluGrad")
    .Attr(BERT_ACTIVATION_TYPE)
    .Input("dy: T")
    .Input("x: T")
    .Input("bias: float")
    .Output("dx: T")
    .Output("dbias: float")
    .SetShapeFn([](InferenceContext* c) {
      c->set_output(0, c->input(1));
      c->set_output(1, c->input(2));
      return Status();
    });

template <typename T>
class BiasGelu : public OpKernel {
 public:
  explicit BiasGelu(OpKernelConstruction* ctx) : OpKernel(ctx) {}
  void Compute(OpKernelContext* ctx) override {
    const Tensor& x = ctx->input(0);
    const Tensor& bias = ctx->input(1);
    OP_REQUIRES(ctx, x.dims() == 2 && bias.dims() == 1 && bias.dim_size(0) == x.dim_size(1),
                tensorflow::errors::InvalidArgument("BertBiasGelu takes x [rows, C], bias [C]"));
    Tensor* y = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, x.shape(), &y));
    const int64 width = x.dim_size(1);
    const T* in = x.flat<T>().data();
    const float* b = bias.flat<float>().data();
    T* out = y->flat<T>().data();
    ForRows(ctx, x.dim_size(0), 40 * width, [&](int64 begin, int64 end) {
      RowIn bias_row(b, width);
      Rows<T> xs(width), ys(width);
      for (int64 r = begin; r < end; ++r) {
        Row pre = xs.Read(in + r * width, width) + bias_row;
        ys.Target(out + r * width, width) = pre * GeluGate(pre);
        ys.Commit(out + r * width, width);
      }
    });
  }
};

template <typename T>
class BiasGeluGrad : public OpKernel {
 public:
  explicit BiasGeluGrad(OpKernelConstruction* ctx) : OpKernel(ctx) {}
  void Compute(OpKernelContext* ctx) override {
    const Tensor& dy = ctx->input(0);
    const Tensor& x = ctx->input(1);
    const Tensor& bias = ctx->input(2);
    OP_REQUIRES(ctx, x.dims() == 2 && dy.shape() == x.shape() &&
                         bias.NumElements() == x.dim_size(1),
                tensorflow::errors::InvalidArgument(
                    "BertBiasGeluGrad takes dy and x [rows, C] and bias [C]"));
    Tensor *dx = nullptr, *dbias = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, x.shape(), &dx));
    OP_REQUIRES_OK(ctx, ctx->allocate_output(1, bias.shape(), &dbias));
    const int64 width = x.dim_size(1);
    const T* g = dy.flat<T>().data();
    const T* in = x.flat<T>().data();
    const float* b = bias.flat<float>().data();
    T* out = dx->flat<T>().data();
    std::vector<double> sums = ForRowBlocks(
        ctx, x.dim_size(0), 60 * width, 1, width, [&](int64 begin, int64 end, float* partial) {
          RowIn bias_row(b, width);
          RowOut dbias_part(partial, width);
          Rows<T> xs(width), gs(width), ds(width);
          for (int64 r = begin; r < end; ++r) {
            Row pre = xs.Read(in + r * width, width) + bias_row;
            Row gate = GeluGate(pre);
            // d/dpre of pre * gate(u): gate + pre * gate' du/dpre, where gate = sigmoid(2u)
            // has gate' = 2 gate (1 - gate).
            Row slope = gate + pre * (2.f * kGeluScale) * gate * (1.f - gate) *
                                   (1.f + 3.f * kGeluCubic * pre * pre);
            RowOut d = ds.Target(out + r * width, width);
            d = gs.Read(g + r * width, width) * slope;
            dbias_part += d;
            ds.Commit(out + r * width, width);
          }
        });
    float* db = dbias->flat<float>().data();
    for (int64 j = 0; j < width; ++j) db[j] = static_cast<float>(sums[j]);
  }
};

BERT_REGISTER("BertBiasGelu", BiasGelu);
BERT_REGISTER("BertBiasGeluGrad", BiasGeluGrad);

// ---- Layer norm of dropout(x + bias) + residual.

REGISTER_OP("BertDropoutAddNorm")
    .Attr(BERT_ACTIVATION_TYPE)
    .Input("x: T")
    .Input("bias: float")
    .Input("residual: T")
    .Input("gamma: float")
    .Input("beta: float")
    .Input("seed: int64")
    .Attr("rate: float")
    .Attr("site: int")
    .Attr("epsilon: float")
    .Output("y: T")
    .Output("sum: float")
    .Output("mean: float")
    .Output("rstd: float")
    .SetShapeFn([](InferenceContext* c) {
      tensorflow::shape_inference::ShapeHandle x;
      TF_RETURN_IF_ERROR(c->WithRank(c->input(0), 2, &x));
      c->set_output(0, x);
      c->set_output(1, x);
      c->set_output(2, c->Vector(c->Dim(x, 0)));
      c->set_output(3, c->Vector(c->Dim(x, 0)));
      return Status();
    });

REGISTER_OP("BertDropoutAddNormGrad")
    .Attr(BERT_ACTIVATION_TYPE)
    .Input("dy: T")
    .Input("sum: float")
    .Input("mean: float")
    .Input("rstd: float")
    .Input("gamma: float")
    .Input("seed: int64")
    .Attr("rate: float")
    .Attr("site: int")
    .Output("dx: T")
    .Output("dresidual: T")
    .Output("dbias: float")
    .Output("dgamma: float")
    .Output("dbeta: float")
    .SetShapeFn([](InferenceContext* c) {
      c->set_output(0, c->input(1));
      c->set_output(1, c->input(1));
      for (int i = 2; i < 5; ++i) c->set_output(i, c->input(4));
      return Status();
    });

template <typename T>
class DropoutAddNorm : public OpKernel {
 public:
  explicit DropoutAddNorm(OpKernelConstruction* ctx) : OpKernel(ctx) {
    OP_REQUIRES_OK(ctx, ctx->GetAttr("rate", &rate_));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("site", &site_));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("epsilon", &epsilon_));
  }
  void Compute(OpKernelContext* ctx) override {
    const Tensor& x = ctx->input(0);
    const Tensor& residual = ctx->input(2);
    OP_REQUIRES(ctx, x.dims() == 2 && x.shape() == residual.shape() &&
                         ctx->input(1).NumElements() == x.dim_size(1) &&
                         ctx->input(3).NumElements() == x.dim_size(1) &&
                         ctx->input(4).NumElements() == x.dim_size(1),
                tensorflow::errors::InvalidArgument(
                    "BertDropoutAddNorm takes x and residual of one shape [rows, C] and "
                    "bias, gamma and beta [C]"));
    if (!SeedIsPair(ctx, 5)) return;
    const int64 rows = x.dim_size(0), width = x.dim_size(1);
    Tensor *y = nullptr, *sum = nullptr, *mean = nullptr, *rstd = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, x.shape(), &y));
    OP_REQUIRES_OK(ctx, ctx->allocate_output(1, x.shape(), &sum));
    OP_REQUIRES_OK(ctx, ctx->allocate_output(2, TensorShape({rows}), &mean));
    OP_REQUIRES_OK(ctx, ctx->allocate_output(3, TensorShape({rows}), &rstd));
    const Dropout dropout(ctx->input(5), rate_, site_);
    const T* in = x.flat<T>().data();
    const T* res = residual.flat<T>().data();
    const float* b = ctx->input(1).flat<float>().data();
    const float* gamma = ctx->input(3).flat<float>().data();
    const float* beta = ctx->input(4).flat<float>().data();
    T* out = y->flat<T>().data();
    float* h = sum->flat<float>().data();
    float* means = mean->flat<float>().data();
    float* rstds = rstd->flat<float>().data();
    const float epsilon = epsilon_;
    ForRows(ctx, rows, 30 * width, [&](int64 begin, int64 end) {
      Row keep(width);
      Rows<T> xs(width), residuals(width), ys(width);
      for (int64 r = begin; r < end; ++r) {
        RowOut hr(h + r * width, width);
        hr = xs.Read(in + r * width, width) + RowIn(b, width);
        if (dropout.active()) {
          dropout.Multipliers(static_cast<uint64_t>(r * width), width, keep.data());
          hr *= keep;
        }
        hr += residuals.Read(res + r * width, width);
        const float m = hr.mean();
        const float inv = 1.f / std::sqrt((hr - m).square().mean() + epsilon);
        means[r] = m;
        rstds[r] = inv;
        ys.Target(out + r * width, width) =
            (hr - m) * (inv * RowIn(gamma, width)) + RowIn(beta, width);
        ys.Commit(out + r * width, width);
      }
    });
  }

 private:
  float rate_, epsilon_;
  int64 site_;
};

template <typename T>
class DropoutAddNormGrad : public OpKernel {
 public:
  explicit DropoutAddNormGrad(OpKernelConstruction* ctx) : OpKernel(ctx) {
    OP_REQUIRES_OK(ctx, ctx->GetAttr("rate", &rate_));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("site", &site_));
  }
  void Compute(OpKernelContext* ctx) override {
    const Tensor& sum = ctx->input(1);
    OP_REQUIRES(ctx, sum.dims() == 2 && ctx->input(0).shape() == sum.shape(),
                tensorflow::errors::InvalidArgument("BertDropoutAddNormGrad: dy and sum differ"));
    if (!SeedIsPair(ctx, 5)) return;
    const int64 rows = sum.dim_size(0), width = sum.dim_size(1);
    Tensor *dx = nullptr, *dresidual = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, sum.shape(), &dx));
    OP_REQUIRES_OK(ctx, ctx->allocate_output(1, sum.shape(), &dresidual));
    const Dropout dropout(ctx->input(5), rate_, site_);
    const T* g = ctx->input(0).flat<T>().data();
    const float* h = sum.flat<float>().data();
    const float* means = ctx->input(2).flat<float>().data();
    const float* rstds = ctx->input(3).flat<float>().data();
    const float* gamma = ctx->input(4).flat<float>().data();
    T* dxs = dx->flat<T>().data();
    T* dhs = dresidual->flat<T>().data();
    // Three column sums: dbias, dgamma, dbeta.
    std::vector<double> sums = ForRowBlocks(
        ctx, rows, 40 * width, 3, width, [&](int64 begin, int64 end, float* partial) {
          RowOut dbias(partial, width), dgamma(partial + width, width),
              dbeta(partial + 2 * width, width);
          Row keep(width);
          Rows<T> gs(width), dhs_rows(width), dxs_rows(width);
          for (int64 r = begin; r < end; ++r) {
            RowIn dy = gs.Read(g + r * width, width);
            Row xhat = (RowIn(h + r * width, width) - means[r]) * rstds[r];
            Row gy = dy * RowIn(gamma, width);
            RowOut dh = dhs_rows.Target(dhs + r * width, width);
            dh = rstds[r] * (gy - gy.mean() - xhat * (gy * xhat).mean());
            dgamma += dy * xhat;
            dbeta += dy;
            RowOut d = dxs_rows.Target(dxs + r * width, width);
            if (dropout.active()) {
              dropout.Multipliers(static_cast<uint64_t>(r * width), width, keep.data());
              d = dh * keep;
            } else {
              d = dh;
            }
            dbias += d;
            dhs_rows.Commit(dhs + r * width, width);
            dxs_rows.Commit(dxs + r * width, width);
          }
        });
    for (int i = 0; i < 3; ++i) {
      Tensor* out = nullptr;
      OP_REQUIRES_OK(ctx, ctx->allocate_output(2 + i, TensorShape({width}), &out));
      float* values = out->flat<float>().data();
      for (int64 j = 0; j < width; ++j) values[j] = static_cast<float>(sums[i * width + j]);
    }
  }

 private:
  float rate_;
  int64 site_;
};

BERT_REGISTER("BertDropoutAddNorm", DropoutAddNorm);
BERT_REGISTER("BertDropoutAddNormGrad", DropoutAddNormGrad);

// ---- Attention: softmax(scores * scale + bias) over the last axis, then dropout.

REGISTER_OP("BertAttentionSoftmax")
    .Attr(BERT_ACTIVATION_TYPE)
    .Input("scores: T")
    .Input("bias: float")
    .Input("seed: int64")
    .Attr("scale: float")
    .Attr("rate: float")
    .Attr("site: int")
    .Output("dropped: T")
    .Output("probs: float")
    .SetShapeFn(MatrixShapes);

REGISTER_OP("BertAttentionSoftmaxGrad")
    .Attr(BERT_ACTIVATION_TYPE)
    .Input("ddropped: T")
    .Input("probs: float")
    .Input("seed: int64")
    .Attr("scale: float")
    .Attr("rate: float")
    .Attr("site: int")
    .Output("dscores: T")
    .SetShapeFn([](InferenceContext* c) {
      c->set_output(0, c->input(1));
      return Status();
    });

template <typename T>
class AttentionSoftmax : public OpKernel {
 public:
  explicit AttentionSoftmax(OpKernelConstruction* ctx) : OpKernel(ctx) {
    OP_REQUIRES_OK(ctx, ctx->GetAttr("scale", &scale_));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("rate", &rate_));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("site", &site_));
  }
  void Compute(OpKernelContext* ctx) override {
    const Tensor& scores = ctx->input(0);
    const Tensor& bias = ctx->input(1);
    // scores [batch, heads, queries, keys]; bias [batch, keys].
    OP_REQUIRES(ctx, scores.dims() == 4 && bias.dims() == 2 &&
                         bias.dim_size(0) == scores.dim_size(0) &&
                         bias.dim_size(1) == scores.dim_size(3),
                tensorflow::errors::InvalidArgument(
                    "BertAttentionSoftmax takes scores [B, heads, Q, S] and bias [B, S]"));
    if (!SeedIsPair(ctx, 2)) return;
    const int64 keys = scores.dim_size(3);
    const int64 rows_per_batch = scores.dim_size(1) * scores.dim_size(2);
    const int64 rows = scores.dim_size(0) * rows_per_batch;
    Tensor* probs = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(1, scores.shape(), &probs));
    const Dropout dropout(ctx->input(2), rate_, site_);
    // In float without dropout, the output is the probabilities themselves.
    const bool aliased = std::is_same<T, float>::value && !dropout.active();
    Tensor* dropped = nullptr;
    if (aliased) {
      ctx->set_output(0, *probs);
    } else {
      OP_REQUIRES_OK(ctx, ctx->allocate_output(0, scores.shape(), &dropped));
    }
    const T* in = scores.flat<T>().data();
    const float* b = bias.flat<float>().data();
    float* p = probs->flat<float>().data();
    T* kept = aliased ? nullptr : dropped->flat<T>().data();
    const float scale = scale_;
    ForRows(ctx, rows, 30 * keys, [&](int64 begin, int64 end) {
      Row keep(keys);
      Rows<T> ins(keys), outs(keys);
      for (int64 r = begin; r < end; ++r) {
        Row z = ins.Read(in + r * keys, keys) * scale +
                RowIn(b + (r / rows_per_batch) * keys, keys);
        z = (z - z.maxCoeff()).exp();
        RowOut pr(p + r * keys, keys);
        pr = z / z.sum();
        if (aliased) continue;
        if (dropout.active()) {
          dropout.Multipliers(static_cast<uint64_t>(r * keys), keys, keep.data());
          outs.Target(kept + r * keys, keys) = pr * keep;
        } else {
          outs.Target(kept + r * keys, keys) = pr;
        }
        outs.Commit(kept + r * keys, keys);
      }
    });
  }

 private:
  float scale_, rate_;
  int64 site_;
};

template <typename T>
class AttentionSoftmaxGrad : public OpKernel {
 public:
  explicit AttentionSoftmaxGrad(OpKernelConstruction* ctx) : OpKernel(ctx) {
    OP_REQUIRES_OK(ctx, ctx->GetAttr("scale", &scale_));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("rate", &rate_));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("site", &site_));
  }
  void Compute(OpKernelContext* ctx) override {
    const Tensor& probs = ctx->input(1);
    OP_REQUIRES(ctx, probs.dims() == 4 && ctx->input(0).shape() == probs.shape(),
                tensorflow::errors::InvalidArgument(
                    "BertAttentionSoftmaxGrad: the gradient and probs differ"));
    if (!SeedIsPair(ctx, 2)) return;
    const int64 keys = probs.dim_size(3);
    const int64 rows = probs.NumElements() / std::max<int64>(keys, 1);
    Tensor* dscores = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, probs.shape(), &dscores));
    const Dropout dropout(ctx->input(2), rate_, site_);
    const T* g = ctx->input(0).flat<T>().data();
    const float* p = probs.flat<float>().data();
    T* out = dscores->flat<T>().data();
    const float scale = scale_;
    ForRows(ctx, rows, 20 * keys, [&](int64 begin, int64 end) {
      Row dp(keys);
      Rows<T> gs(keys), outs(keys);
      for (int64 r = begin; r < end; ++r) {
        if (dropout.active()) {
          dropout.Multipliers(static_cast<uint64_t>(r * keys), keys, dp.data());
          dp *= gs.Read(g + r * keys, keys);
        } else {
          dp = gs.Read(g + r * keys, keys);
        }
        RowIn pr(p + r * keys, keys);
        outs.Target(out + r * keys, keys) = scale * pr * (dp - (dp * pr).sum());
        outs.Commit(out + r * keys, keys);
      }
    });
  }

 private:
  float scale_, rate_;
  int64 site_;
};

BERT_REGISTER("BertAttentionSoftmax", AttentionSoftmax);
BERT_REGISTER("BertAttentionSoftmaxGrad", AttentionSoftmaxGrad);

// ---- Attention heads: [B, S, heads * d] + bias -> [B, heads, S, d], and back.
// TensorFlow does the bias add and the transpose as two passes (three with the
// reshape's copy on TF 1.15); here each is one copy.

REGISTER_OP("BertSplitHeads")
    .Attr(BERT_ACTIVATION_TYPE)
    .Input("x: T")
    .Input("bias: float")
    .Attr("heads: int")
    .Output("y: T")
    .SetShapeFn([](InferenceContext* c) {
      int64 heads;
      TF_RETURN_IF_ERROR(c->GetAttr("heads", &heads));
      tensorflow::shape_inference::ShapeHandle x;
      TF_RETURN_IF_ERROR(c->WithRank(c->input(0), 3, &x));
      tensorflow::shape_inference::DimensionHandle size;
      TF_RETURN_IF_ERROR(c->Divide(c->Dim(x, 2), heads, true, &size));
      c->set_output(0, c->MakeShape({c->Dim(x, 0), c->MakeDim(heads), c->Dim(x, 1), size}));
      return Status();
    });

Status MergedShape(InferenceContext* c) {
  tensorflow::shape_inference::ShapeHandle y;
  TF_RETURN_IF_ERROR(c->WithRank(c->input(0), 4, &y));
  tensorflow::shape_inference::DimensionHandle width;
  TF_RETURN_IF_ERROR(c->Multiply(c->Dim(y, 1), c->Dim(y, 3), &width));
  c->set_output(0, c->MakeShape({c->Dim(y, 0), c->Dim(y, 2), width}));
  if (c->num_outputs() > 1) c->set_output(1, c->Vector(width));
  return Status();
}

REGISTER_OP("BertMergeHeads")
    .Attr(BERT_ACTIVATION_TYPE)
    .Input("y: T")
    .Output("x: T")
    .SetShapeFn(MergedShape);

// The gradient of BertSplitHeads: dy [B, heads, S, d] merged back to [B, S, heads * d],
// and the bias's gradient, its sum over the token rows.
REGISTER_OP("BertSplitHeadsGrad")
    .Attr(BERT_ACTIVATION_TYPE)
    .Input("dy: T")
    .Output("dx: T")
    .Output("dbias: float")
    .SetShapeFn(MergedShape);

// One copy between [B, S, heads, d] (row-major, with bias on the way in) and
// [B, heads, S, d], parallel over the B * S token rows.
template <typename T>
void CopyHeads(OpKernelContext* ctx, const T* from, const float* bias, T* to,
               int64 batch, int64 seq, int64 heads, int64 size, bool split) {
  ForRows(ctx, batch * seq, 2 * heads * size, [&](int64 begin, int64 end) {
    Rows<T> ins(size), outs(size);
    for (int64 row = begin; row < end; ++row) {
      const int64 b = row / seq, s = row % seq;
      for (int64 h = 0; h < heads; ++h) {
        const int64 token = (row * heads + h) * size;             // [B, S, heads, d]
        const int64 head = ((b * heads + h) * seq + s) * size;    // [B, heads, S, d]
        if (split) {
          outs.Target(to + head, size) = ins.Read(from + token, size) + RowIn(bias + h * size, size);
          outs.Commit(to + head, size);
        } else {
          std::memcpy(to + token, from + head, size * sizeof(T));
        }
      }
    }
  });
}

template <typename T>
class SplitHeads : public OpKernel {
 public:
  explicit SplitHeads(OpKernelConstruction* ctx) : OpKernel(ctx) {
    OP_REQUIRES_OK(ctx, ctx->GetAttr("heads", &heads_));
  }
  void Compute(OpKernelContext* ctx) override {
    const Tensor& x = ctx->input(0);
    const Tensor& bias = ctx->input(1);
    OP_REQUIRES(ctx, x.dims() == 3 && x.dim_size(2) % heads_ == 0 &&
                         bias.NumElements() == x.dim_size(2),
                tensorflow::errors::InvalidArgument(
                    "BertSplitHeads takes x [B, S, heads * d] and bias [heads * d]"));
    const int64 size = x.dim_size(2) / heads_;
    Tensor* y = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(
                            0, TensorShape({x.dim_size(0), heads_, x.dim_size(1), size}), &y));
    CopyHeads<T>(ctx, x.flat<T>().data(), bias.flat<float>().data(), y->flat<T>().data(),
                 x.dim_size(0), x.dim_size(1), heads_, size, true);
  }

 private:
  int64 heads_;
};

template <typename T>
class MergeHeads : public OpKernel {
 public:
  explicit MergeHeads(OpKernelConstruction* ctx) : OpKernel(ctx) {}
  void Compute(OpKernelContext* ctx) override {
    const Tensor& y = ctx->input(0);
    OP_REQUIRES(ctx, y.dims() == 4,
                tensorflow::errors::InvalidArgument("BertMergeHeads takes [B, heads, S, d]"));
    const int64 heads = y.dim_size(1), size = y.dim_size(3);
    Tensor* x = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(
                            0, TensorShape({y.dim_size(0), y.dim_size(2), heads * size}), &x));
    CopyHeads<T>(ctx, y.flat<T>().data(), nullptr, x->flat<T>().data(), y.dim_size(0),
                 y.dim_size(2), heads, size, false);
    if (ctx->num_outputs() < 2) return;
    // (BertSplitHeadsGrad:) the column sums of the merged rows, in float.
    const int64 rows = y.dim_size(0) * y.dim_size(2), width = heads * size;
    const T* merged = x->flat<T>().data();
    std::vector<double> sums = ForRowBlocks(
        ctx, rows, 2 * width, 1, width, [&](int64 begin, int64 end, float* partial) {
          RowOut total(partial, width);
          Rows<T> ins(width);
          for (int64 r = begin; r < end; ++r) total += ins.Read(merged + r * width, width);
        });
    Tensor* dbias = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(1, TensorShape({width}), &dbias));
    float* db = dbias->flat<float>().data();
    for (int64 j = 0; j < width; ++j) db[j] = static_cast<float>(sums[j]);
  }
};

BERT_REGISTER("BertSplitHeads", SplitHeads);
BERT_REGISTER("BertMergeHeads", MergeHeads);
BERT_REGISTER("BertSplitHeadsGrad", MergeHeads);

// ---- Dropout alone, of a tensor of any shape. Its gradient is the same op on the
// incoming gradient (the same seed, site and rate draw the same mask).

REGISTER_OP("BertDropout")
    .Attr(BERT_ACTIVATION_TYPE)
    .Input("x: T")
    .Input("seed: int64")
    .Attr("rate: float")
    .Attr("site: int")
    .Output("y: T")
    .SetShapeFn(MatrixShapes);

template <typename T>
class DropoutOp : public OpKernel {
 public:
  explicit DropoutOp(OpKernelConstruction* ctx) : OpKernel(ctx) {
    OP_REQUIRES_OK(ctx, ctx->GetAttr("rate", &rate_));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("site", &site_));
  }
  void Compute(OpKernelContext* ctx) override {
    const Tensor& x = ctx->input(0);
    if (!SeedIsPair(ctx, 1)) return;
    Tensor* y = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, x.shape(), &y));
    const Dropout dropout(ctx->input(1), rate_, site_);
    const T* in = x.flat<T>().data();
    T* out = y->flat<T>().data();
    const int64 block = 4096;
    ForRows(ctx, (x.NumElements() + block - 1) / block, 4 * block, [&](int64 begin, int64 end) {
      Row keep(block);
      Rows<T> ins(block), outs(block);
      for (int64 b = begin; b < end; ++b) {
        const int64 first = b * block;
        const int64 n = std::min(block, x.NumElements() - first);
        dropout.Multipliers(static_cast<uint64_t>(first), n, keep.data());
        outs.Target(out + first, n) = ins.Read(in + first, n) * keep.head(n);
        outs.Commit(out + first, n);
      }
    });
  }

 private:
  float rate_;
  int64 site_;
};

BERT_REGISTER("BertDropout", DropoutOp);

// ---- The dropout multipliers themselves (scale or 0), for tests and references.

REGISTER_OP("BertDropoutMultipliers")
    .Input("seed: int64")
    .Attr("rate: float")
    .Attr("site: int")
    .Attr("size: int")
    .Output("multipliers: float")
    .SetShapeFn([](InferenceContext* c) {
      int64 size;
      TF_RETURN_IF_ERROR(c->GetAttr("size", &size));
      c->set_output(0, c->Vector(size));
      return Status();
    });

class DropoutMultipliers : public OpKernel {
 public:
  explicit DropoutMultipliers(OpKernelConstruction* ctx) : OpKernel(ctx) {
    OP_REQUIRES_OK(ctx, ctx->GetAttr("rate", &rate_));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("site", &site_));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("size", &size_));
  }
  void Compute(OpKernelContext* ctx) override {
    if (!SeedIsPair(ctx, 0)) return;
    Tensor* out = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, TensorShape({size_}), &out));
    Dropout(ctx->input(0), rate_, site_).Multipliers(0, size_, out->flat<float>().data());
  }

 private:
  float rate_;
  int64 site_, size_;
};

REGISTER_KERNEL_BUILDER(Name("BertDropoutMultipliers").Device(tensorflow::DEVICE_CPU),
                        DropoutMultipliers);

// ---- AdamWeightDecay's update of a variable and its slots, in one pass over memory.
//
// With g = grad * grad_scale (the global-norm clipping's factor), element by element and
// in this order, as the reference path (a clipped gradient, the variable times `decay`,
// then TensorFlow's Adam kernel with its bias correction off) computes it:
//   m = m + (g - m) (1 - beta1);  v = v + (g^2 - v) (1 - beta2);
//   var = var * decay - (m lr) / (sqrt(v) + epsilon),
// where decay is 1 - lr * the weight-decay rate (1 for a variable without decay).

REGISTER_OP("BertAdamWeightDecay")
    .Input("var: resource")
    .Input("m: resource")
    .Input("v: resource")
    .Input("grad: float")
    .Input("grad_scale: float")
    .Input("lr: float")
    .Input("decay: float")
    .Attr("beta1: float")
    .Attr("beta2: float")
    .Attr("epsilon: float")
    .SetIsStateful()
    .SetShapeFn([](InferenceContext* c) {
      for (int i = 4; i < 7; ++i) {
        tensorflow::shape_inference::ShapeHandle scalar;
        TF_RETURN_IF_ERROR(c->WithRank(c->input(i), 0, &scalar));
      }
      return Status();
    });

// Whether a variable's buffer is its own alone: no read still holds it (what TensorFlow's
// Tensor::RefCountIsOne says; that one is private on TF 1.15's headers).
bool BufferIsUnshared(Tensor* t) {
  tensorflow::TensorBuffer* buffer = tensorflow::DMAHelper::buffer(t);
  return buffer != nullptr && buffer->RefCountIsOne() && buffer->root_buffer()->RefCountIsOne() &&
         buffer->OwnsMemory();
}

class AdamWeightDecay : public OpKernel {
 public:
  explicit AdamWeightDecay(OpKernelConstruction* ctx) : OpKernel(ctx) {
    OP_REQUIRES_OK(ctx, ctx->GetAttr("beta1", &beta1_));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("beta2", &beta2_));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("epsilon", &epsilon_));
  }

  void Compute(OpKernelContext* ctx) override {
    static const char* const kNames[3] = {"var", "m", "v"};
    tensorflow::core::RefCountPtr<tensorflow::Var> vars[3];
    for (int i = 0; i < 3; ++i)
      OP_REQUIRES_OK(ctx, tensorflow::LookupResource(ctx, tensorflow::HandleFromInput(ctx, i),
                                                     &vars[i]));
    // Each distinct variable's lock, taken in the order of their addresses (TensorFlow's
    // rule, so that two updates never wait on each other).
    std::vector<tensorflow::mutex*> locks;
    for (auto& var : vars)
      if (std::find(locks.begin(), locks.end(), var->mu()) == locks.end())
        locks.push_back(var->mu());
    std::sort(locks.begin(), locks.end());
    for (tensorflow::mutex* mu : locks) mu->lock();
    struct Unlock {
      std::vector<tensorflow::mutex*>* locks;
      ~Unlock() {
        for (tensorflow::mutex* mu : *locks) mu->unlock();
      }
    } unlock{&locks};

    const Tensor& grad = ctx->input(3);
    float* data[3];
    for (int i = 0; i < 3; ++i) {
      Tensor* t = vars[i]->tensor();
      OP_REQUIRES(ctx, t->IsInitialized() && t->dtype() == tensorflow::DT_FLOAT &&
                           t->shape() == grad.shape(),
                  tensorflow::errors::InvalidArgument(
                      "BertAdamWeightDecay: ", kNames[i], " must be an initialised float ",
                      "variable of the gradient's shape ", grad.shape().DebugString(), ", not ",
                      t->IsInitialized() ? t->shape().DebugString() : "uninitialised"));
      // A read that still holds the buffer (a matrix multiply of the backward pass) keeps
      // its values: update a copy, as TensorFlow's own training ops do.
      if (vars[i]->copy_on_read_mode.load() || !BufferIsUnshared(t)) {
        Tensor copy;
        OP_REQUIRES_OK(ctx, ctx->allocate_temp(tensorflow::DT_FLOAT, t->shape(), &copy));
        std::memcpy(copy.flat<float>().data(), t->flat<float>().data(),
                    sizeof(float) * t->NumElements());
        *t = copy;
      }
      data[i] = t->flat<float>().data();
    }
    const float scale = ctx->input(4).scalar<float>()();
    const float lr = ctx->input(5).scalar<float>()();
    const float decay = ctx->input(6).scalar<float>()();
    const float keep1 = 1.f - beta1_, keep2 = 1.f - beta2_, epsilon = epsilon_;
    const float* g_data = grad.flat<float>().data();
    const int64 size = grad.NumElements(), block = 4096;
    ForRows(ctx, (size + block - 1) / block, 12 * block, [&](int64 begin, int64 end) {
      Row g(block);
      for (int64 b = begin; b < end; ++b) {
        const int64 first = b * block, n = std::min(block, size - first);
        RowOut var(data[0] + first, n), m(data[1] + first, n), v(data[2] + first, n);
        g.head(n) = RowIn(g_data + first, n) * scale;
        m += (g.head(n) - m) * keep1;
        v += (g.head(n).square() - v) * keep2;
        var = var * decay - (m * lr) / (v.sqrt() + epsilon);
      }
    });
  }

 private:
  float beta1_, beta2_, epsilon_;
};

REGISTER_KERNEL_BUILDER(Name("BertAdamWeightDecay").Device(tensorflow::DEVICE_CPU),
                        AdamWeightDecay);

}  // namespace bert_fused
