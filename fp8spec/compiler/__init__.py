"""Compile a validated spec into a launch bundle: adapters build a plan of settings, the bundle writer renders it."""
