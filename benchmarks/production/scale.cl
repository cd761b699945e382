// out = x * SCALE: the same work as pyopencl's own `x * 2` (a grid-stride loop over GROUPS work-groups of
// BLOCK work-items, as pyopencl's elementwise kernels run), as a ktune template.
__kernel void scale(__global float* out, __global const float* x, int n) {
    for (int i = get_global_id(0); i < n; i += get_global_size(0)) out[i] = x[i] * SCALE;
}
