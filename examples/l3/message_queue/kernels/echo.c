/*
 * message_queue kernel: answers the messages of an L3<->L2 message queue (simpler/queue.h,
 * docs/comm.md §8) until the host sends STOP.
 *
 * Scalars: the queue region's six descriptor words, then the wait timeout (us). Loop: look
 * at input 0; STOP: release it and return; DATA of n bytes (n/4 f32 values): send a DATA
 * reply of the same length holding each value * 2 + 1, then release the input; ERROR: send
 * an ERROR with the same text, release, go on. On any error code (a bad region or header
 * SIMPLER_COMM_BAD_ARGUMENT, also for DATA whose length is not a multiple of 4; a host that
 * stops sending or reading SIMPLER_COMM_WAIT_TIMEOUT; host abort SIMPLER_COMM_PEER_FAILED)
 * it sets the chip abort counter and fails with that code. Submit it with
 * require_sync_start: it waits for the host.
 */
#include "simpler/queue.h"

/* Handles one DATA or ERROR message; SIMPLER_COMM_OK or the code to fail with. */
static int32_t queue_echo_answer(SimplerQueue *q, uint32_t opcode, const void *data, uint64_t nbytes, uint64_t timeout_us) {
    if (opcode == SIMPLER_QUEUE_ERROR) return simpler_queue_send(q, SIMPLER_QUEUE_ERROR, data, nbytes, timeout_us);
    if (nbytes % sizeof(float) != 0) return SIMPLER_COMM_BAD_ARGUMENT;
    void *dst = NULL;
    const int32_t rc = simpler_queue_reserve(q, nbytes, &dst, timeout_us);
    if (rc != SIMPLER_COMM_OK) return rc;
    const unsigned char *in = (const unsigned char *)data;
    unsigned char *out = (unsigned char *)dst;
    for (uint64_t i = 0; i < nbytes; i += sizeof(float)) {
        float v;
        memcpy(&v, in + i, sizeof v);
        v = v * 2.0f + 1.0f;
        memcpy(out + i, &v, sizeof v);
    }
    return simpler_queue_commit(q, SIMPLER_QUEUE_DATA);
}

SIMPLER_KERNEL void kernel_entry(int64_t *args) {
    if (!simpler_expect_args(args, 0, SIMPLER_REGION_DESCRIPTOR_WORDS + 1)) return;
    const uint64_t timeout_us = simpler_arg_u64(args, SIMPLER_REGION_DESCRIPTOR_WORDS);
    SimplerQueue q;
    int32_t rc = simpler_queue_from_args(args, 0, &q);
    while (rc == SIMPLER_COMM_OK) {
        uint32_t opcode = 0;
        const void *data = NULL;
        uint64_t nbytes = 0;
        rc = simpler_queue_peek(&q, 0, &opcode, &data, &nbytes, timeout_us);
        if (rc != SIMPLER_COMM_OK) break;
        if (opcode == SIMPLER_QUEUE_STOP) {
            rc = simpler_queue_release(&q, 1);
            if (rc == SIMPLER_COMM_OK) return;
            break;
        }
        rc = queue_echo_answer(&q, opcode, data, nbytes, timeout_us);
        if (rc == SIMPLER_COMM_OK) rc = simpler_queue_release(&q, 1);
    }
    simpler_queue_abort(&q);
    simpler_comm_fail(args, rc);
}
