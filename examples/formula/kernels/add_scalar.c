/*
 * add_scalar.c — AIV kernel: out = x + s, element by element (f32).
 *
 * Arguments: tensor 0 = x (input), tensor 1 = out (written), then one f32 scalar s at
 * argument slot 2 (slot = number of tensors + scalar index). The two views must have the
 * same shape (1-D or 2-D) and dtype f32; they may be strided.
 * On a bad argument the kernel writes nothing and fails the run (simpler_kernel_fail).
 */
#include "simpler/kernel.h"

#define KERNEL_BAD_TENSOR 1 /* wrong dtype or ndims not 1 or 2 */
#define KERNEL_BAD_SHAPE 2  /* operand shapes differ */

/* A 1-D or 2-D f32 view seen as rows x cols with element strides. */
typedef struct View2 {
    float *data;
    uint64_t rows, cols;
    uint64_t row_stride, col_stride;
} View2;

static int view2(const SimplerChipTensor *t, View2 *v) {
    if (t == NULL || t->dtype != SIMPLER_DT_FLOAT32) return 0;
    v->data = SIMPLER_TENSOR_DATA(float, t);
    if (t->ndims == 1) {
        v->rows = 1;
        v->cols = t->shapes[0];
        v->row_stride = 0;
        v->col_stride = t->strides[0];
        return 1;
    }
    if (t->ndims == 2) {
        v->rows = t->shapes[0];
        v->cols = t->shapes[1];
        v->row_stride = t->strides[0];
        v->col_stride = t->strides[1];
        return 1;
    }
    return 0;
}

SIMPLER_KERNEL void kernel_entry(int64_t *args) {
    View2 x, out;
    if (!view2(simpler_arg_tensor(args, 0), &x) || !view2(simpler_arg_tensor(args, 1), &out)) {
        simpler_kernel_fail(args, KERNEL_BAD_TENSOR);
        return;
    }
    if (x.rows != out.rows || x.cols != out.cols) {
        simpler_kernel_fail(args, KERNEL_BAD_SHAPE);
        return;
    }
    const float s = simpler_arg_f32(args, 2);
    for (uint64_t r = 0; r < out.rows; ++r) {
        const float *xr = x.data + r * x.row_stride;
        float *outr = out.data + r * out.row_stride;
        for (uint64_t c = 0; c < out.cols; ++c) outr[c * out.col_stride] = xr[c * x.col_stride] + s;
    }
}
