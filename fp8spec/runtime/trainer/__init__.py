"""Trainer-side patches of the Megatron path: compatibility fixes and the FP8 training report."""
