"""The rules: a registry of rules (one module per topic, each rule with its examples), the runner that turns
findings into diagnostics (runner.py), and the prober that checks the values a hint proposes (probing.py,
proposals.py)."""
