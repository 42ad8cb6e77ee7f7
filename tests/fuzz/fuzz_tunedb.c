/* libFuzzer target for the tuning-database parser: any bytes give a status,
 * never a crash, a leak or an out-of-bounds read. */
#include "internal.h"

int LLVMFuzzerTestOneInput(const unsigned char *data, size_t size)
{
    size_t n = 0;
    oclf_status st = oclf_tunedb_parse_text((const char *)data, size, &n);
    if (st != OCLF_SUCCESS && st != OCLF_DB_ERROR && st != OCLF_OUT_OF_RESOURCES)
        __builtin_trap();
    if (st != OCLF_SUCCESS && n != 0)
        __builtin_trap();
    return 0;
}
