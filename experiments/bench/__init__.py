"""Benchmarks, each a script: ``python experiments/bench/<name>.py --help`` (scheduler: planning time per
policy; sim: simulator events/s; startup: command start-up; sweep: sweep throughput per backend)."""
