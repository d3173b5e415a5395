"""pylibbpf's benchmark suite: BPF ring/perf buffer consumers against C libbpf and bcc (see benchmarks/README.md)."""
