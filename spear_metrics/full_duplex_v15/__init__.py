"""Full-Duplex-Bench v1.5 (overlap handling): data reader, timing, behaviour judge, before/after features, significance tests."""
