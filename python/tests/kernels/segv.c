/* Test kernel: writes through a NULL pointer, so the process running it gets SIGSEGV. */
#include "simpler/kernel.h"

SIMPLER_KERNEL void kernel_entry(int64_t *args) {
    (void)args;
    *(volatile float *)0 = 1.0f;
}
