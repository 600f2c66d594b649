"""Full-Duplex-Bench v1.0 scoring (take-over, latency, backchannel, interruption relevance)."""
