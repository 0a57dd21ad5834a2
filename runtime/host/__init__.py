"""What a container keeps on its host and shows outside it: the job's directory and its lock,
storage faults named truthfully, the metrics registry and its reporters, the health probes and
the one-thread HTTP server that serves them, JSON-lines files. It imports nothing else of the
runtime (docs/architecture.md)."""
