/* The README's C example (the ```c block under "## From C"), extracted at
 * build time by tests/readme_block.py into readme_example.h and compiled
 * here as the body of a function, then run and its result checked. */
#include <oclfuse.h>

#include <stdio.h>
#include <stdlib.h>

static int example(cl_context cl_ctx, cl_device_id dev, cl_command_queue queue, cl_mem x,
                   cl_mem y, size_t rows, size_t cols)
{
#include "readme_example.h"
    return st != OCLF_SUCCESS;
}

int main(void)
{
    cl_platform_id plat;
    cl_device_id dev;
    cl_int err;
    if (clGetPlatformIDs(1, &plat, NULL) != CL_SUCCESS ||
        clGetDeviceIDs(plat, CL_DEVICE_TYPE_ALL, 1, &dev, NULL) != CL_SUCCESS) {
        fprintf(stderr, "no OpenCL device\n");
        return 1;
    }
    cl_context cl = clCreateContext(NULL, 1, &dev, NULL, NULL, &err);
    cl_command_queue q = clCreateCommandQueue(cl, dev, 0, &err);
    const size_t rows = 3, cols = 10;
    float hx[30], hy[30];
    for (int i = 0; i < 30; i++)
        hx[i] = (float)(i % 7) - 3.0f;
    cl_mem x = clCreateBuffer(cl, CL_MEM_READ_WRITE | CL_MEM_COPY_HOST_PTR, sizeof hx, hx, &err);
    cl_mem y = clCreateBuffer(cl, CL_MEM_READ_WRITE, sizeof hy, NULL, &err);
    int rc = example(cl, dev, q, x, y, rows, cols);
    if (rc == 0) {
        clEnqueueReadBuffer(q, y, CL_TRUE, 0, sizeof hy, hy, 0, NULL, NULL);
        /* each row of the result has mean square 1 (up to eps) */
        for (size_t r = 0; r < rows && rc == 0; r++) {
            double ms = 0;
            for (size_t c = 0; c < cols; c++)
                ms += (double)hy[r * cols + c] * hy[r * cols + c];
            ms /= (double)cols;
            if (ms < 0.999 || ms > 1.001) {
                fprintf(stderr, "row %zu: mean square %f, expected 1\n", r, ms);
                rc = 1;
            }
        }
    }
    clReleaseMemObject(x);
    clReleaseMemObject(y);
    clReleaseCommandQueue(q);
    clReleaseContext(cl);
    return rc;
}
