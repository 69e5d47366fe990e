/* Test kernel: fails the run with code 7 and writes nothing. */
#include "simpler/kernel.h"

SIMPLER_KERNEL void kernel_entry(int64_t *args) { simpler_kernel_fail(args, 7); }
