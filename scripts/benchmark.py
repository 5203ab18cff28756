"""Same as ``fairseq-san-bench``, without installing the console script."""
from fairseq_san.cli.bench import main
main()
