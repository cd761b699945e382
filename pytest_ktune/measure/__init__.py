"""Running and measuring a target: the kernel handle, the compile cache, production calls (the fast path,
torch tensors in and out, the torch custom op), verification against the reference, the timing method, and
the isolated worker process.

May import: core, backends."""
