/* Test source with a compile error on line 6 (an undeclared identifier). */
#include "simpler/kernel.h"

SIMPLER_KERNEL void kernel_entry(int64_t *args) {
    (void)args;
    undeclared_identifier += 1;
}
