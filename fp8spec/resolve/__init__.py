"""Values a spec leaves to defaults that depend on other fields or on the model, resolved in one place.

Rules, the compiler and the planner read these instead of re-deriving them, so a default cannot differ
between what is checked and what is emitted.
"""
