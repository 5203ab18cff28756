"""Tasks registered with fairseq."""
