/*
 * Test kernel: never returns (sleeps forever, touching nothing). Used to check that a hung
 * kernel ends its run with the op-execute timeout and that close() and interpreter exit
 * survive the device thread still executing it.
 */
#define _POSIX_C_SOURCE 199309L
#include <time.h>

#include "simpler/kernel.h"

SIMPLER_KERNEL void kernel_entry(int64_t *args) {
    (void)args;
    const struct timespec ms = {0, 1000000};
    for (;;) nanosleep(&ms, NULL);
}
