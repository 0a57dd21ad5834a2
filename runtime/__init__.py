"""The runtime: everything that touches time, I/O and processes."""
