#!/usr/bin/env bash
# The paper's WMT14 En-De system (section 4.1) on 8 GPUs: transformer base, Adam (0.9, 0.98, 1e-9),
# inverse-sqrt warm-up 4k, 100k updates, 4096 tokens per GPU, label smoothing 0.1, dropout 0.1,
# no weight decay (the paper names none, nor do Vaswani et al.; fairseq's scaling_nmt sets 0.0),
# the average of the last 5 checkpoints, beam 4, batch 16 (the paper names no length penalty:
# fairseq's default, 1.0); thetas from the paper's ranges ([0.3, 0.4] self-attention, [0.4, 0.5]
# encoder-decoder attention).
#
#   examples/wmt14_en_de/run.sh [--dry-run] [WORK_DIR]
#
# It needs 8 GPUs and days of training, so it cannot run on the CPU machines this project is
# tested on: --dry-run prints every command instead. Data: fairseq's own WMT14 En-De preparation
# script with --icml17 (Moses tokenization, 40k joint BPE, newstest2014 test; its validation set
# is every 100th training pair, not the paper's newstest2013). BLEU is on tokenized text with the
# BPE removed: newstest2014's by fairseq-san-score, with its sacrebleu signature, in
# WORK_DIR/run/final/test.json (sacrebleu's 13a tokens of the Moses tokens; no compound splitting).
# Running it again resumes: the archives downloaded whole, the data's preparation and binarizing
# (WORK_DIR/.done-*; WORK_DIR: runs/wmt14_en_de by default), the average and the test's decoding
# (their outputs: WORK_DIR/run/final.pt, final/test.json), once finished, and the loop's finished
# steps are skipped. The preparation
# script is fairseq's at a fixed commit, run only if its sha256 is the one pinned here, with Moses
# and subword-nmt at pinned commits; the checkpoints are
# averaged by fairseq-san-average, which reads them with torch's safe loader.
set -euo pipefail
source "$(dirname "$0")/../commands.sh"

USAGE="usage: examples/wmt14_en_de/run.sh [--dry-run] [WORK_DIR]"
DRY_RUN=0 WORK=
for arg in "$@"; do  # --dry-run anywhere: given after WORK_DIR, it was taken for a real run
  case $arg in
    -h | --help) echo "$USAGE"; exit 0 ;;
    --dry-run) DRY_RUN=1 ;;
    -*) echo "run.sh: unknown option $arg; $USAGE" >&2; exit 2 ;;
    "") echo "run.sh: WORK_DIR is empty (an unset \"\$WORK\"?): name a folder, or leave it" \
      "out for runs/wmt14_en_de; $USAGE" >&2; exit 2 ;;
    *) [ -z "$WORK" ] || { echo "run.sh: one WORK_DIR only; $USAGE" >&2; exit 2; }; WORK=$arg ;;
  esac
done
WORK=${WORK:-runs/wmt14_en_de}  # runs/: git-ignored, as every recipe's work
case $WORK in  # fairseq reads DATA1:DATA2 as two data directories, and X,Y as two prefixes
  *:*) echo "run.sh: WORK_DIR $WORK holds ':', which fairseq reads between two data directories" >&2; exit 2 ;;
  *,*) echo "run.sh: WORK_DIR $WORK holds ',', which fairseq-preprocess reads between two file prefixes" >&2; exit 2 ;;
esac
[ ! -e "$WORK" ] || [ -d "$WORK" ] || {  # mkdir's "Not a directory" named neither
  echo "run.sh: WORK_DIR $WORK is a file: give a folder (made when missing)" >&2; exit 2; }
# fairseq's examples/translation/prepare-wmt14en2de.sh as of its last change (2019-11-07), at that
# commit: downloaded, checked against its sha256, then run.
FAIRSEQ_COMMIT=13d9e2baf8a67339bcdb25af18538630f7fa128f
FAIRSEQ_RAW=https://raw.githubusercontent.com/facebookresearch/fairseq/$FAIRSEQ_COMMIT
PREPARE_SHA256=d34382e7986f6fdaede569edc7a5c15670ed4583867fb847436f423bb3865a41
# That script clones Moses and subword-nmt from their default branches: they are cloned first, at
# these commits (their newest on 2026-11-30), so its own clones find them there and leave them
# ("fatal: destination path ... already exists", which it ignores).
MOSES_COMMIT=34452895f350bf097b21ee514a529a1dc542243c
SUBWORD_NMT_COMMIT=92d6139d07d30e12735a0af9e7f7f925ebe62c54
# The archives that script reads with --icml17 (WMT14's training data; without it, WMT17's news
# commentary into wmt17_en_de/), downloaded here first, each whole or not at all: the script takes
# any file of an archive's name as downloaded, unpacks only what it downloaded itself, and goes on
# without a corpus it cannot read (what it reads from them: fairseq-san-loop wmt14-check corpora).
ARCHIVES=(
  http://statmt.org/wmt13/training-parallel-europarl-v7.tgz
  http://statmt.org/wmt13/training-parallel-commoncrawl.tgz
  http://statmt.org/wmt14/training-parallel-nc-v9.tgz
  http://data.statmt.org/wmt17/translation-task/dev.tgz
  http://statmt.org/wmt14/test-full.tgz
)
# What it writes.
PREPARED=$WORK/wmt14_en_de
# The commands a real run needs, checked before hours of downloads and tokenizing.
TOOLS=(curl git tar perl python sha256sum fairseq-preprocess fairseq-train fairseq-san-loop
  fairseq-san-average fairseq-generate)
DATA=$WORK/data-bin
RUN=$WORK/run
GPUS=8  # the paper's; fairseq-train's --distributed-world-size
DRY=()
[ "$DRY_RUN" = 1 ] && DRY=(--dry-run)

run() {  # run COMMAND...: print it; execute it unless --dry-run
  { printf '+'; printf ' %q' "$@"; printf '\n'; } >&2
  [ "$DRY_RUN" = 1 ] || "$@"
}

done_before() {  # done_before STEP: whether a run before this one finished STEP (not in a dry run)
  [ "$DRY_RUN" = 0 ] && [ -f "$WORK/.done-$1" ]
}

made() {  # made FILE: whether a run before this one wrote FILE, its step's last output
  [ "$DRY_RUN" = 0 ] && [ -f "$1" ]
}

refuse() {  # refuse MESSAGE: one line, exit 1
  echo "run.sh: $1" >&2
  exit 1
}

check_sha256() {  # check_sha256 FILE SHA256: refuse, in one line, a download that is not pinned
  printf '+ sha256sum %q  # must be %s\n' "$1" "$2" >&2
  [ "$DRY_RUN" = 0 ] || return 0
  local sum
  sum=$(sha256sum "$1") && sum=${sum%% *}
  if [ "$sum" != "$2" ]; then
    rm -f "$1"
    refuse "$1 has sha256 ${sum:-?}, not $2 (fairseq $FAIRSEQ_COMMIT's): not run, removed"
  fi
}

pinned_clone() {  # pinned_clone URL DIR COMMIT: WORK/DIR at COMMIT (cloned unless there)
  [ -d "$WORK/$2/.git" ] || run git clone -q "$1" "$WORK/$2"
  run git -C "$WORK/$2" checkout -q "$3"
}

finished() {  # finished STEP: a re-run skips STEP (downloads, hours of tokenizing and BPE, the binarizing)
  [ "$DRY_RUN" = 1 ] || touch "$WORK/.done-$1"
}

check_tools() {  # refuse a real run without a command it needs
  need_commands run.sh "${TOOLS[@]}"
}

download() {  # download URL: WORK/orig/NAME whole, then unpacked there; skips what a run before did
  local name=${1##*/}
  if ! done_before "download-$name"; then
    run curl -fSL -o "$WORK/orig/$name.partial" "$1"
    run mv "$WORK/orig/$name.partial" "$WORK/orig/$name"
    finished "download-$name"
  fi
  if ! done_before "unpack-$name"; then
    run tar -xzf "$WORK/orig/$name" -C "$WORK/orig"
    finished "unpack-$name"
  fi
}

check() {  # check WHAT ARG: fairseq-san-loop wmt14-check's refusal, one line, exit 1 (not in a
  # dry run): corpora, every file the preparation script reads; prepared, what it left, whole and
  # parallel; gpus, a machine with the GPUs of fairseq-train, before hours of downloads
  [ "$DRY_RUN" = 1 ] || fairseq-san-loop wmt14-check "$1" -- "$2"
}

[ "$DRY_RUN" = 1 ] || check_tools
check gpus "$GPUS"
run mkdir -p "$WORK/orig"
if ! done_before prepare; then
  for url in "${ARCHIVES[@]}"; do
    download "$url"
  done
  check corpora "$WORK/orig"
  run curl -fsSL -o "$WORK/prepare-wmt14en2de.sh" "$FAIRSEQ_RAW/examples/translation/prepare-wmt14en2de.sh"
  check_sha256 "$WORK/prepare-wmt14en2de.sh" "$PREPARE_SHA256"
  pinned_clone https://github.com/moses-smt/mosesdecoder.git mosesdecoder "$MOSES_COMMIT"
  pinned_clone https://github.com/rsennrich/subword-nmt.git subword-nmt "$SUBWORD_NMT_COMMIT"
  run bash -c 'cd "$1" && bash prepare-wmt14en2de.sh --icml17' _ "$WORK"
  check prepared "$PREPARED"
  finished prepare
fi
if ! done_before preprocess; then
  check prepared "$PREPARED"
  # Into a folder of its own, renamed when whole: fairseq-preprocess refuses a folder that holds
  # a dictionary, so an interrupted binarizing stopped every re-run.
  run rm -rf "$DATA" "$DATA.partial"
  run fairseq-preprocess --source-lang en --target-lang de --joined-dictionary \
    --trainpref "$PREPARED/train" --validpref "$PREPARED/valid" \
    --testpref "$PREPARED/test" --destdir "$DATA.partial" --workers 16
  run mv "$DATA.partial" "$DATA"
  finished preprocess
fi

# The references BLEU is scored against: the tokenized text with its BPE removed, as the
# hypotheses are (validation: the loop's --post-process; the test: fairseq-generate --remove-bpe).
for split in valid test; do
  run bash -c 'sed -r "s/(@@ )|(@@ ?\$)//g" "$1/$2.de" > "$1/$2.ref.de"' _ "$PREPARED" "$split"
done

# The loop (it prints its own commands); the options after -- override its small-corpus defaults.
"$(dirname "$0")/../learn_to_share.sh" "${DRY[@]}" --data "$DATA" --run-dir "$RUN" \
  --arch transformer_san_base --theta-self 0.4 --theta-encdec 0.5 --updates 100000 \
  --valid-ref "$PREPARED/valid.ref.de" --post-process subword_nmt \
  -- --distributed-world-size "$GPUS" --max-tokens 4096 --lr 7e-4 --warmup-updates 4000 \
  --dropout 0.1 --weight-decay 0.0 --save-interval-updates 1000 --keep-interval-updates 5

# The average and its test: in RUN, each skipped when its output is there (written whole), so that
# a new run (RUN removed) makes them again (markers in WORK_DIR skipped both, leaving no model);
# the test also when final.pt is newer than it (averaged again: its score was the old model's).
FINAL=$RUN/final
if ! made "$FINAL.pt"; then
  run fairseq-san-average --inputs "$RUN/last/checkpoints" --num-update-checkpoints 5 \
    --output "$FINAL.pt"
fi
# Skipped by its score, written whole (fairseq-generate writes its results as it goes).
if ! made "$FINAL/test.json" || [ "$FINAL.pt" -nt "$FINAL/test.json" ]; then
  USER_DIR=$(fairseq-san-loop user-dir)
  run fairseq-generate "$DATA" --user-dir "$USER_DIR" --path "$FINAL.pt" --gen-subset test \
    --beam 4 --batch-size 16 --remove-bpe --scoring sacrebleu --results-path "$FINAL"
  run fairseq-san-score "$FINAL/generate-test.txt" --reference "$PREPARED/test.ref.de" \
    -o "$FINAL/test.json"
fi
