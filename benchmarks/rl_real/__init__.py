"""Real-size RL runs of compiled bundles, and the bare engine a bundle describes."""
