"""Running and measuring a target: the kernel handle, the compile cache, verification against the reference,
the timing method, and the isolated worker process. (The production call is ``pytest_ktune.call``'s.)

May import: core, backends."""
