/*
 * mul.c — AIV kernel: out = x * y, element by element (f32).
 *
 * Arguments: tensor 0 = x (input), tensor 1 = y (input), tensor 2 = out (written).
 * The three views must have the same shape (1-D or 2-D) and dtype f32. Views may be
 * strided: element (r, c) of a 2-D view is at data[r*strides[0] + c*strides[1]].
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

static int same_shape(const View2 *p, const View2 *q) {
    return p->rows == q->rows && p->cols == q->cols;
}

SIMPLER_KERNEL void kernel_entry(int64_t *args) {
    View2 x, y, out;
    if (!view2(simpler_arg_tensor(args, 0), &x) || !view2(simpler_arg_tensor(args, 1), &y) ||
        !view2(simpler_arg_tensor(args, 2), &out)) {
        simpler_kernel_fail(args, KERNEL_BAD_TENSOR);
        return;
    }
    if (!same_shape(&x, &y) || !same_shape(&x, &out)) {
        simpler_kernel_fail(args, KERNEL_BAD_SHAPE);
        return;
    }
    for (uint64_t r = 0; r < out.rows; ++r) {
        const float *xr = x.data + r * x.row_stride;
        const float *yr = y.data + r * y.row_stride;
        float *outr = out.data + r * out.row_stride;
        if (x.col_stride == 1 && y.col_stride == 1 && out.col_stride == 1) {
            for (uint64_t c = 0; c < out.cols; ++c) outr[c] = xr[c] * yr[c];
        } else {
            for (uint64_t c = 0; c < out.cols; ++c)
                outr[c * out.col_stride] = xr[c * x.col_stride] * yr[c * y.col_stride];
        }
    }
}
