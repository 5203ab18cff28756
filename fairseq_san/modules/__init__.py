"""Attention modules: shared (SAN) and average (AAN) attention."""
