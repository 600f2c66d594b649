"""Loopback fakes of public real-time speech protocols (127.0.0.1, port 0 only), clocked by the
audio samples they receive, for the adapter tests."""
