"""Executors that dispatch rollouts somewhere other than local worker processes."""
