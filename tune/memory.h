/*
 * The memory side of the benchmark: the copies an op's bandwidth is held
 * against, and the device's last-level cache with shapes that exceed it.
 *
 * Two copies. The DRAM copy (op_copy_gbps) moves 256 MiB each way, more
 * than any cache holds, once per run. The same-bytes copy (op_copy) moves
 * exactly an op's minimum traffic, half read and half written, and is timed
 * among the op's own samples: an op whose operands sit in the cache is then
 * compared with a copy whose buffers sit there too, and one that streams
 * from DRAM with a copy that does as well.
 */
#ifndef OCLF_MEMORY_H
#define OCLF_MEMORY_H

#include "opdesc.h"

/* The DRAM copy's bandwidth in GB/s (read + write bytes / time), the best
 * of the copy kernels, and which of them won into *variant (may be NULL;
 * op_copy_create takes it). <0 when no kernel ran. */
double op_copy_measure(const op_env *env, int *variant);

typedef struct op_copy op_copy;

/* A copy moving `bytes` in all (bytes / 2 read from one buffer, as many
 * written to another, rounded up to 64), with kernel `variant` of
 * op_copy_measure. Where the device cannot hold that beside what is
 * already allocated, the copy halves until it fits, though never below
 * `floor_bytes` (the caller's size past which a copy streams from DRAM at
 * the same rate whatever its size): op_copy_bytes says what it moves. NULL and a sentence in err when even
 * that does not fit. Buffers are filled before it returns, so a device that
 * allocates lazily fails here, not while it is timed. */
op_copy *op_copy_create(const op_env *env, double bytes, double floor_bytes, int variant, char *err,
                        size_t errlen);
/* Bytes one call moves (read + written). */
double op_copy_bytes(const op_copy *c);
/* One copy, enqueued; *event (may be NULL) completes with it. 0, or -1. */
int op_copy_run(const op_env *env, op_copy *c, cl_event *event);
void op_copy_destroy(op_copy *c);
/* For tests: how many buffer pairs the copy spans, and piece i's source
 * (dst 0) or destination (dst 1) buffer, of op_copy_piece_bytes each. */
int op_copy_pieces(const op_copy *c);
cl_mem op_copy_buffer(const op_copy *c, int piece, int dst);
size_t op_copy_piece_bytes(const op_copy *c, int piece);

/* An op instance and a copy behind one descriptor (op_pair_desc), so that
 * tm_measure interleaves the copy's samples with the op's paths: the
 * choice `copy_choice` (compared by address) runs the copy, any other the
 * op. */
typedef struct op_pair {
    const op_desc *op;
    void *inst;
    op_copy *copy;
    const oclf_choice *copy_choice;
} op_pair;
extern const op_desc op_pair_desc;

/* The size of the level-3 cache in a sysfs cache folder
 * (/sys/devices/system/cpu/cpu0/cache: index*, each with "level" and
 * "size" such as "32768K"), the largest where several are level 3; 0 when
 * none is found. */
uint64_t op_sysfs_l3_bytes(const char *cache_dir);
/* The last-level cache an op's operands must exceed to stream from DRAM:
 * the device's CL_DEVICE_GLOBAL_MEM_CACHE_SIZE, or on a CPU device the L3
 * the system reports where that is smaller (a CPU driver may report a
 * per-core or a made-up figure). Both inputs as read into *device_bytes
 * and *l3_bytes (may be NULL); 0 when neither is known. */
uint64_t op_llc_bytes(const op_env *env, uint64_t *device_bytes, uint64_t *l3_bytes);
/* The choice itself: the smaller of the known figures (0: unknown), the
 * system's L3 only for a CPU device. */
uint64_t op_llc_pick(uint64_t device_bytes, uint64_t l3_bytes, int is_cpu);

/* The op's out-of-cache shape for a last-level cache of `llc` bytes: its
 * uncached_shape with dimension uncached_dim grown by a whole multiple of
 * itself until the minimum traffic exceeds twice `llc` in the narrowest
 * storage dtype (so every dtype of a run shares the shape and exceeds it).
 * 1 and the shape in *out; 0 when the op names none or llc is 0. */
int op_uncached_shape(const op_desc *op, uint64_t llc, op_shape *out);

#endif
