//! Tests of the whole system: the three services' real binaries as separate processes on
//! one isolated stack, driven through the public API the way a sale drives them. The
//! tests live in `tests/system/`; this library is empty on purpose.
