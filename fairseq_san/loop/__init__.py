"""The learn-to-share loop's bookkeeping, which ``examples/learn_to_share.sh`` asks through
``fairseq-san-loop``: the run's record and lock (``run_record``), what a decoded split was made
from (``decode_key``) and the systems ``test_bleu.sh`` scores (``bleu_systems``), when the loop
stops (``stopping``), the table of iterations (``summary``), training logs (``train_log``), a
recipe's command line and its options (``recipe_options``), a language model's validation
perplexity (``perplexity``), the data the recipes prepare (``prepared_data``)."""
