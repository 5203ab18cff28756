"""Command-line entry points of fairseq-san."""
