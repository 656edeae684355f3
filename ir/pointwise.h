/* pointwise.h: the pointwise ops as data.  One row an op: its scalar
 * forward and the gradients of its inputs, as C expressions that are also
 * CUDA C, and its FLOPs per element.  Everything else is derived from the
 * row: the op and its backward in the op enum (op_kinds.h) and the op
 * table (ops.c), the CPU kernels (runtime/cpu/pointwise.c) and the CUDA
 * kernels, fusable with their neighbours (codegen/cuda_pointwise.c).
 * Adding a pointwise op is adding a row here (and a helper function below
 * when its expression wants one).
 *
 * Not for ops that read other elements than i (softmax, the norms) or that
 * reshape (flatten, copy): those are ordinary ops with kernels of their own.
 *
 * A row: X(ENUM, name, inputs, FLOPs forward, FLOPs backward, has backward,
 *          y =, gradient of input 0 =, gradient of input 1 =)
 *   inputs    1 (x) or 2 (x, z) tensors of one shape; y has it too;
 *   FLOPs     per element: of y, and of all the input gradients together
 *             (the estimator's cost of the op and of its backward op);
 *   has       1: a backward op ENUM_BACKWARD, (inputs..., dy) -> the
 *   backward  gradients its `grads` attribute asks for; 0: the gradient
 *             passes through unchanged (add: autodiff needs no op);
 *   the       expressions of the floats x, z (the inputs at element i) and
 *   formulas  dy (the output's gradient at i), in parentheses; an unused
 *             gradient is (0.0f).  They are evaluated in f32 as written:
 *             the CPU and the GPU round the same operations the same way.
 *
 * The numbers the rows replaced, kept bit for bit (the parity tests): gelu
 * is the tanh form through 1 + tanh(u) = 2/(1 + e^-2u) (no cancellation
 * near u = 0, one exponential); silu's e^-x and gelu's e^-2u are capped at
 * e^88 so that s = 1/(1 + e) underflows to 0 instead of making inf·0.
 * sigmoid (torch.sigmoid) came as its row alone: no other product file. */
#ifndef FUSION_POINTWISE_H
#define FUSION_POINTWISE_H

#define FU_POINTWISE_OPS(X)                                                                                 \
    X(GELU, gelu, 1, 10, 16, 1, (x / (1.0f + fu_gelu_e(x))), (fu_gelu_grad(x, dy)), (0.0f))                 \
    X(RELU, relu, 1, 1, 1, 1, (x > 0.0f ? x : 0.0f), (x > 0.0f ? dy : 0.0f), (0.0f))                        \
    X(SILU, silu, 1, 5, 8, 1, (x / (1.0f + fu_exp_neg(x))), (fu_silu_grad(x, dy)), (0.0f))                  \
    X(SIGMOID, sigmoid, 1, 4, 3, 1, (fu_sigmoid(x)), (dy * fu_sigmoid(x) * (1.0f - fu_sigmoid(x))), (0.0f)) \
    X(ADD, add, 2, 1, 0, 0, (x + z), (dy), (dy))                                                            \
    X(MUL, mul, 2, 1, 2, 1, (x * z), (dy * z), (dy * x))

/* The helpers the expressions call, C that is also CUDA C: FN is the back
 * end's function qualifiers (static inline; __device__), EXP
 * its f32 exponential (runtime/cpu's kernel_expf; CUDA's expf).
 *   gelu: y = x / (1 + e), e = e^(-2u), u = β(x + κx³), β = sqrt(2/π), κ = 0.044715
 *         dy/dx = s + 2x·s·(1 - s)·β(1 + 3κx²), s = 1/(1 + e), 1 - s = e·s
 *   sigmoid: s = 1/(1 + e^-x);  ds/dx = s·(1 - s)
 *   silu: y = x·s;  dy/dx = s·(1 + x(1 - s)) */
#define FU_POINTWISE_FUNCTIONS(FN, EXP)                                         \
    FN float fu_gelu_e(float x)                                                 \
    {                                                                           \
        float u2 = -2.0f * 0.7978845608028654f * (x + 0.044715f * x * x * x);   \
        return EXP(u2 > 88.0f ? 88.0f : u2);                                    \
    }                                                                           \
    FN float fu_gelu_grad(float x, float dy)                                    \
    {                                                                           \
        float e = fu_gelu_e(x), s = 1.0f / (1.0f + e), oms = e * s;             \
        float dinner = 0.7978845608028654f * (1.0f + 3.0f * 0.044715f * x * x); \
        return dy * (s + 2.0f * x * s * oms * dinner);                          \
    }                                                                           \
    FN float fu_exp_neg(float x)                                                \
    {                                                                           \
        float a = -x;                                                           \
        return EXP(a > 88.0f ? 88.0f : a);                                      \
    }                                                                           \
    FN float fu_sigmoid(float x) { return 1.0f / (1.0f + fu_exp_neg(x)); }      \
    FN float fu_silu_grad(float x, float dy)                                    \
    {                                                                           \
        float s = fu_sigmoid(x);                                                \
        return dy * s * (1.0f + x * (1.0f - s));                                \
    }

/* For the rows' users: a macro selected by the has-backward column
 * (FU_IF_BACKWARD_##has(...)), and a row's expressions as text. */
#define FU_IF_BACKWARD_0(...)
#define FU_IF_BACKWARD_1(...) __VA_ARGS__
#define FU_TEXT(...)          #__VA_ARGS__
#define FU_XTEXT(...)         FU_TEXT(__VA_ARGS__)

#endif
