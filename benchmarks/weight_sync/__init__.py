"""The trainer side of a weight sync, measured without an engine."""
