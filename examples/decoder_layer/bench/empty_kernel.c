/*
 * empty_kernel.c — a kernel that does nothing, for examples/decoder_layer/bench.py.
 *
 * bench.py registers it under every func id of the decoder layer (AIC and AIV alike) to
 * time the same task graph with no kernel work: what is left is the runtime's own cost
 * (orchestration, dependency discovery, scheduling, dispatch, completion).
 */
#include "simpler/kernel.h"

SIMPLER_KERNEL void kernel_entry(int64_t *args) { (void)args; }
