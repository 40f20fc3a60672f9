"""The rule engine: a registry of rules (one module per topic) and the runner that turns findings into diagnostics."""
