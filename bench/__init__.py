"""Reproducible benchmarks of AMQP 1.0 brokers (ours and foreign peers); see bench/README.md."""
