/* libFuzzer target for the program-cache file parser (oclf_cache_parse).
 * The key is taken from the first 16 bytes so valid headers are reachable. */
#include "internal.h"

#include <string.h>

int LLVMFuzzerTestOneInput(const unsigned char *data, size_t size)
{
    oclf_hash key = {0, 0};
    if (size >= 16) {
        memcpy(&key.a, data, 8);
        memcpy(&key.b, data + 8, 8);
        data += 16;
        size -= 16;
    }
    const unsigned char *payload = NULL;
    size_t n = 0;
    if (oclf_cache_parse(data, size, &key, &payload, &n) == NULL) {
        /* A valid payload lies inside the input. */
        if (payload < data || payload + n > data + size || n == 0)
            __builtin_trap();
        volatile unsigned char sink = payload[n - 1];
        (void)sink;
    }
    return 0;
}
