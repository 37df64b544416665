"""Benchmarks the program runs on itself (llmgw ctl bench …)."""
