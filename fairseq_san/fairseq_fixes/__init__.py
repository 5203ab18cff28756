"""Every change the plugin makes to fairseq's own behaviour, one module each, installed together.

``install()`` runs once, when the plugin registers with an imported fairseq (``fairseq_san``'s
``__init__``), and changes these for the whole process; each module's docstring names the
upstream behaviour it corrects, and each fix is idempotent (``wrapping.wrap_once``):

* ``literal_eval``: configuration strings that fairseq ``eval()``s (from the command line or a
  checkpoint) are evaluated as literals only, never as code;
* ``namespace_overrides``: arguments that fairseq writes out as hydra overrides (a command
  line's, a checkpoint's ``args``) read back as they were: a text with a backslash before a
  quote or at its end (hydra's OverrideParseException), and a checkpoint's argument that fairseq
  reads as a literal and that is none is one line naming the checkpoint;
* ``safe_loading``: torch's safe loader accepts fairseq checkpoints (``argparse.Namespace``), a
  checkpoint that cannot be loaded is one line naming the file, one with code in a field that
  fairseq evaluates is refused;
* ``checkpoint_broadcast``: a distributed fairseq-train that starts from a checkpoint sends it
  from rank 0 to the others in a form the safe loader reads (every other rank failed);
* ``model_overrides``: ``--model-overrides`` and the hub's keywords for a checkpoint of the
  plugin's models are checked against it: a key nothing reads, a value its option cannot take,
  an unregistered component, a name for a group or the model that fairseq would ignore, or a
  switch to a component without the group's options is refused (fairseq ignored or failed on
  them), and so is a language model's ``add_bos_token`` unlike its training (fairseq-validate's
  command line, the hub's keyword: another perplexity, silently);
* ``dictionary_words``: a checkpoint records its dictionaries' words, and fairseq's ensemble
  loader (generate, interactive, validate, eval-lm, the hub, the benchmark) refuses data whose
  dictionaries hold other words in as many entries (fairseq compared sizes only, and decoded
  nonsense), as fairseq-train's resume and fine-tune do (``restore_file``);
* ``data_shards``: a task set up on sharded data (DATA1:DATA2) refuses a shard of other
  dictionaries than the first folder's, and fairseq-train one without the training split (it
  stopped at that shard's epoch);
* ``last_batch``: every sentence of a subset is batched (fairseq main drops a last batch whose
  size is not a multiple of ``--required-batch-size-multiple``);
* ``numpy2``: fairseq's language-model datasets work on numpy 2 (``np.compat.long``);
* ``empty_subsets``: a binarized subset of no sentence is one line naming its file (numpy's
  "cannot mmap an empty file" traceback);
* ``interactive_input``: fairseq-interactive's input that is not UTF-8 is one line naming it,
  also on standard input (where the locale may turn it into unknown words); the plugin's
  messages name its sentences as its output numbers them (S-N); a buffer of lines all skipped
  as too long (``--skip-invalid-size-inputs-valid-test``) is logged, and the command goes on;
* ``clean_exit``: fairseq's background batch loaders stop before the interpreter exits;
* ``restore_file``: fairseq-train refuses a ``--restore-file`` or ``--finetune-from-model`` that
  is not there (it trained from scratch, or printed a traceback), and a scheduler's state that
  its ``--lr-scheduler`` cannot read (a ``KeyError`` traceback);
* ``resumed_training``: a resumed fairseq-train batches as the run it continues did, counts its
  ``--patience`` on from the checkpoint, stops before it trains past a limit its checkpoint
  had reached (it drifted, counted from zero, and took one update more), and chooses its best
  checkpoint anew under another ``--best-checkpoint-metric`` (it kept the old metric's best);
* ``save_dir_lock``: fairseq-train holds its ``--save-dir`` (a lock file in it, rank 0) for the
  whole run, and a second run on that folder is refused in one line naming it and the first
  run's pid (the two saved over each other's checkpoints: one died on the other's temporary
  file, the other finished with both runs' saves mixed, silently);
* ``checkpoint_copies``: fairseq-train's copies of a checkpoint (``checkpoint_last.pt``) are whole
  or absent (a run stopped while copying left a truncated file that stopped every rerun);
* ``shared_checkpoints``: fairseq's own models (``--arch transformer``) refuse a checkpoint
  trained with attention sharing or AAN in one line naming the plugin's model that loads it, and
  one of another size naming the first difference (fairseq's "please ensure that the
  architectures match" traceback);
* ``translation_models``: fairseq's language-modelling task refuses an encoder-decoder model
  (fairseq-eval-lm of an ``--arch transformer`` checkpoint) in one line, as the plugin's
  translation models do (an ``AttributeError``, ``supported_targets``, deep in fairseq);
* ``half_precision``: fairseq-train refuses ``--fp16`` or ``--bf16`` on the CPU (tracebacks in
  fairseq's trainer);
* ``command_options``: a command without the ``--arch``, ``--task`` or ``--path`` it needs, with
  ``--replace-unk`` (which fairseq 0.12 cannot honour), with a number out of its range
  (``option_ranges``: ``--update-freq 0``, ``--dropout 1.5``), ``--tokenizer moses`` without its
  languages, ``--num-batch-buckets`` without ``--max-tokens``, ``--pad-to-fixed-bsz`` in
  fairseq-eval-lm, fairseq-generate or fairseq-interactive, a ``--model-overrides`` that is no dict,
  an empty subset name, or with a plugin option that its task or model does not have or that it
  would ignore, is refused as it is parsed; fairseq-preprocess's inputs that are missing or folders,
  its ``--workers`` out of range and an ``--align-suffix`` without its file, too; ``--help`` lists
  the options of the model, task and other components the command line chose (fairseq printed its
  help before it added them); and, for fairseq-train, ``world_size``: a world size below 1 or beyond
  the GPUs without a launcher, torchrun's ranks take its world size, ranks that cannot train on CPUs
  are refused; ``lr_schedulers``: a learning-rate scheduler's options it would fail on as it is
  built (``polynomial_decay`` without ``--total-num-update``, ``tri_stage`` without its stages, more
  than one ``--lr`` for a scheduler that takes one, a scheduler's number given as nan or inf);
* ``tokens_per_sample``: the language-modelling task refuses a ``--tokens-per-sample`` below 1 or
  above ``--max-target-positions`` (fairseq fails deep in its datasets, or drops every sample),
  and samples longer than the model's positions (fairseq-eval-lm's, the context window
  included, and fairseq-generate's), or a ``--context-window`` that leaves nothing of them to
  score; its samples' sizes count
  ``--add-bos-token``'s start token (a sample as long as the positions was one too long), and
  fairseq-train refuses a model with no position for it before any update;
* ``forced_ends``: fairseq's ``language_modeling`` and ``translation`` tasks name the prompts
  and ``--prefix-size`` tokens that hold the end of sentence in a warning, and refuse those that
  begin with it above beam 1 in one line, as the plugin's tasks do (fairseq-generate's
  ``AssertionError: 15 < 15``);
* ``vocabulary_searches``: fairseq's ``language_modeling`` and ``translation`` tasks refuse a
  ``--sampling-topk``, or the 2 x beam tokens of ``--diversity-rate`` and ``--constraints``,
  above the target dictionary's entries (a traceback inside torch's topk), an ``--nbest`` above
  the beam they keep (fewer hypotheses printed) and a ``--lenpen`` that leaves 32-bit floats at
  the longest output (an OverflowError), as the plugin's tasks do;
* ``generation_shards``: fairseq-generate translates the shard that ``--num-shards`` and
  ``--shard-id`` name (it translated the whole subset in every shard), fairseq-eval-lm refuses a
  shard that does not exist or holds no batch (a traceback; a perplexity of 1.00 of no token),
  and the commands that ignore the two options refuse them;
* ``subword_joining``: fairseq-eval-lm's ``--remove-bpe`` (``--post-process subword_nmt``)
  joins subword-nmt's pieces into words (it joined nothing: a perplexity of pieces, silently);
* ``batch_tokens``: a subset's sentence longer than ``--max-tokens`` is one line naming the
  subset, the sentence and its length (fairseq's assertion named only the limit);
* ``dictionary_files``: a dictionary file fairseq cannot read is one line naming it (tracebacks
  naming neither the file nor the line's problem);
* ``lm_fusion``: fairseq-generate refuses an ``--lm-path`` language model whose dictionary is not
  the target's (a traceback at the first step, or scores of other words fused silently);
* ``diverse_beam_search``: ``--diverse-beam-groups`` looks its groups' overlap up by the batch's
  positions (it took sentence ids for them: an IndexError at the second step of most batches),
  a finished hypothesis keeps its place (it went on past its end: ``[21, 21, 2, 2]``), each
  hypothesis keeps its group (those after an ended one took other groups' places), one group is
  beam search, and ``candidate_multiple=2`` is refused;
* ``prefix_constrained_search``: a ``prefix_allowed_tokens_fn`` (the hub's, the task's
  ``build_generator``'s) never returns a hypothesis that goes on after its end of sentence
  (fairseq's search gave its generator half the candidates it counts on);
* ``constrained_alignment``: ``--print-alignment`` aligns a sentence that fairseq's generator
  finished with fewer hypotheses than the beam (``--constraints``: an ``IndexError``);
* ``prefix_min_len``: ``--min-len`` holds for a sentence whose prefix (a language model's
  prompt) is shorter than its batch's longest (fairseq let it end before ``min_len``, and a
  prompt's output depended on the prompts batched with it);
* ``ngram_blocking``: ``--no-repeat-ngram-size`` blocks repeated n-grams without fairseq's CUDA
  extension (it blocked nothing), and ``--sampling`` beside it draws no output from a hypothesis
  left no token (its end of sentence blocked at the maximum length: a multinomial error);
* ``sampling_underflow``: ``--sampling`` draws a hypothesis whose every allowed token's
  probability is below float's smallest (a forced prompt token at a low ``--temperature``; torch's
  multinomial failed for the whole batch);
* ``special_symbols``: fairseq-interactive's lines and the hub's inputs that hold the padding
  symbol (a typed ``<pad>``) are refused (fairseq read it as padding: left out of a source or a
  score, generated in after a prompt), and so are a typed ``<s>`` and ``</s>`` in a
  translation's source (a sentence's beginning or end in the middle of it);
* ``language_pair``: a translation task given ``--source-lang`` or ``--target-lang`` alone
  refuses a data folder whose file names give another (fairseq read the pair from them and
  ignored the language given);
* ``retained_dropout``: ``--retain-dropout-modules`` (fairseq-generate, fairseq-interactive, the
  hub's ``generation_args``) refuses a name that no dropout of the model bears (a misspelt one
  kept no dropout, silently), naming those it has;
* ``task_state``: a task copies (``copy.deepcopy`` of a hub model: fairseq's task state called
  itself until a RecursionError);
* ``list_options``: a fraction or an infinity in a list option of integers (``--update-freq
  2.9``, ``1e309``) is refused as it is parsed (fairseq truncated it, or failed with an
  ``OverflowError``);
* ``text_inputs``: fairseq-preprocess's input that is not UTF-8 is one line naming it (a
  "negative seek position" traceback);
* ``one_line_errors``: bad input is printed as ``fairseq-san: error: ...``, not a traceback.

One more acts before these can be installed, as fairseq is imported after the plugin (the hub,
the plugin's own commands): ``fairseq_san.logging_left_to_the_program``, fairseq's import leaves
the process's logging alone (its wav2vec2_classification module set the root logger to DEBUG).
"""

import importlib

# In the order installed; imported by ``install`` only, so that a module of no fairseq (the
# literal evaluator that fairseq-san-loop decode-key reads keys with) imports without fairseq.
FIXES = (
    "literal_eval", "namespace_overrides", "safe_loading", "checkpoint_broadcast",
    "model_overrides", "dictionary_words", "data_shards", "last_batch", "numpy2",
    "empty_subsets", "interactive_input", "clean_exit", "restore_file", "resumed_training",
    "save_dir_lock", "checkpoint_copies", "shared_checkpoints", "translation_models",
    "half_precision", "command_options", "tokens_per_sample", "forced_ends", "generation_shards",
    "subword_joining", "batch_tokens", "dictionary_files", "lm_fusion", "diverse_beam_search",
    "prefix_constrained_search", "constrained_alignment", "prefix_min_len", "ngram_blocking",
    "sampling_underflow", "language_pair", "special_symbols", "retained_dropout", "task_state",
    "list_options", "vocabulary_searches", "text_inputs", "one_line_errors",
)


def install() -> None:
    """Install every fix for this process (fairseq must be imported)."""
    for name in FIXES:
        importlib.import_module(f"{__name__}.{name}").install()
