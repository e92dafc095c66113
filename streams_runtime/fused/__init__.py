"""Fused operators: chains of processors the runtime runs as one, a whole batch of records per
call, on the native core (``streams_runtime._native``, native/) or on its pure-Python reference
where the native core was not built."""
