# Sourced by the prepare.sh recipes: where Multi30k's gzipped raw files (SPLIT.LANG.gz) are.
# MULTI30K_DIR holds them; unset, each is downloaded into $TEXT from the public multi30k/dataset
# repository. The caller sets $splits ("raw name:fairseq split ...") and $TEXT. check_prepared
# says whether a finished OUT_DIR holds the data asked for, check_same_raw that it was prepared
# from MULTI30K_DIR's text, check_unfinished that an unfinished
# one holds none that binarize did not write, binarize runs fairseq-preprocess so that a stopped
# run leaves none.
# The commit that ../shared/data/multi30k's README names (its files byte for byte): master may
# move on, and the published figures would then come from other data.
MULTI30K_COMMIT=a3d2e0d26b56f3846f66a952536ffed4e401d05a
MULTI30K_URL=https://github.com/multi30k/dataset/raw/$MULTI30K_COMMIT/data/task1/raw

has_test_2017() {  # has_test_2017 LANG: whether test_2017_flickr has LANG: in MULTI30K_DIR, or
  # in the repository, which has it for en, de and fr (not cs): a download that fails is then an
  # error, not a pair without test1
  if [ -n "${MULTI30K_DIR:-}" ]; then
    [ -f "$MULTI30K_DIR/test_2017_flickr.$1.gz" ]
  else
    case $1 in en | de | fr) return 0 ;; *) return 1 ;; esac
  fi
}

check_multi30k_dir() {  # check_multi30k_dir LANG...: every split's raw file, before writing anything
  [ -n "${MULTI30K_DIR:-}" ] || return 0
  [ -d "$MULTI30K_DIR" ] || {
    echo "prepare.sh: MULTI30K_DIR=$MULTI30K_DIR: no such directory" >&2; exit 1; }
  local pair lang raw
  for pair in $splits; do
    for lang in "$@"; do
      raw=$MULTI30K_DIR/${pair%%:*}.$lang.gz
      [ -f "$raw" ] || { echo "prepare.sh: no $raw" >&2; exit 1; }
    done
  done
}

check_parallel() {  # check_parallel SPLIT SRC TGT RAW_SPLIT: the split's raw text in $TEXT has a line for
  # each line of the other side (binarized uneven, fairseq-train failed on its assertion "Source
  # and target must contain the same number of examples", a traceback naming no file)
  local lines_src lines_tgt
  lines_src=$(wc -l < "$TEXT/$1.raw.$2") lines_tgt=$(wc -l < "$TEXT/$1.raw.$3")
  [ "$lines_src" = "$lines_tgt" ] || {
    echo "prepare.sh: $1: $(raw_file "$4" "$2") has $lines_src lines and $(raw_file "$4" "$3")" \
      "$lines_tgt: not a parallel corpus (check MULTI30K_DIR's files)" >&2
    exit 1; }
}

check_out_dir() {  # check_out_dir OUT: a folder mkdir can make or has made, not a file
  [ ! -e "$1" ] || [ -d "$1" ] || {
    echo "prepare.sh: OUT_DIR $1 is a file: give a folder (made when missing)" >&2; exit 2; }
}

check_vocab_size() {  # VOCAB_SIZE a positive decimal count, as its number: "08000" is 8000 (the
  # finished OUT's 8000 pieces were "not 08000"), "abc" refused before any text is written, and
  # one of more than 10 digits (bash's arithmetic wrapped it round: 99999999999999999999 pieces
  # were "7766279631452241919")
  [[ $VOCAB_SIZE =~ ^0*[0-9]{1,10}$ ]] && [ "$((10#$VOCAB_SIZE))" -gt 0 ] || {
    echo "prepare.sh: VOCAB_SIZE=$VOCAB_SIZE: give a positive whole number of pieces (at most" \
      "2147483647)" >&2; exit 2; }
  VOCAB_SIZE=$((10#$VOCAB_SIZE))
}

check_prepared() {  # check_prepared OUT FILE WHAT [VOCAB_SIZE]: a finished OUT holds WHAT
  # (its FILE) and, where VOCAB_SIZE is given, that many pieces; else the run would go on with
  # other data than asked for
  local out=$1 file=$2 what=$3 vocab=${4:-} pieces
  [ -f "$out/$file" ] || {
    echo "prepare.sh: $out holds other data than $what (no $file): choose another OUT_DIR" >&2
    exit 1; }
  pieces=$(wc -l 2>/dev/null < "$out/spm.vocab" || echo unknown)
  [ -z "$vocab" ] || [ "$pieces" = "$vocab" ] || {
    echo "prepare.sh: $out holds a vocabulary of $pieces pieces, not VOCAB_SIZE=$vocab:" \
      "choose another OUT_DIR" >&2
    exit 1; }
}

check_same_raw() {  # check_same_raw OUT LANG...: a finished OUT holds the text of MULTI30K_DIR
  # (where set) in OUT/text/SPLIT.raw.LANG; one prepared from other files was "ready", and the
  # run went on with other data than asked for
  [ -n "${MULTI30K_DIR:-}" ] || return 0
  [ -d "$MULTI30K_DIR" ] || {  # a typo was "ready": nothing to compare with
    echo "prepare.sh: MULTI30K_DIR=$MULTI30K_DIR: no such directory" >&2; exit 1; }
  local out=$1 pair lang raw kept compared=0
  shift
  for pair in $splits test_2017_flickr:test1; do
    for lang in "$@"; do
      raw=$MULTI30K_DIR/${pair%%:*}.$lang.gz kept=$out/text/${pair##*:}.raw.$lang
      [ -f "$raw" ] && [ -f "$kept" ] || continue
      compared=1
      gzip -dc "$raw" 2> /dev/null | cmp -s - "$kept" || {
        echo "prepare.sh: $out was prepared from other text than MULTI30K_DIR=$MULTI30K_DIR" \
          "($raw is not $kept): choose another OUT_DIR" >&2
        exit 1; }
    done
  done
  [ "$compared" = 1 ] || {  # an empty or wrong folder was "ready" too
    echo "prepare.sh: MULTI30K_DIR=$MULTI30K_DIR holds none of $out's raw files" \
      "(SPLIT.LANG.gz): check MULTI30K_DIR" >&2
    exit 1; }
}

raw_file() {  # raw_file SPLIT LANG -> path of the gzipped raw file (downloaded if needed)
  local name=$1.$2.gz
  if [ -n "${MULTI30K_DIR:-}" ]; then
    echo "$MULTI30K_DIR/$name"
  else
    # into NAME.part, renamed when complete: a stopped download is fetched again, not reused
    [ -f "$TEXT/$name" ] || { curl -fsL -o "$TEXT/$name.part" "$MULTI30K_URL/$name" &&
      mv "$TEXT/$name.part" "$TEXT/$name"; } || {
      echo "prepare.sh: cannot download $MULTI30K_URL/$name (set MULTI30K_DIR to a local copy)" >&2
      return 1; }
    echo "$TEXT/$name"
  fi
}

check_unfinished() {  # check_unfinished OUT: an OUT without .done holds no dictionary but one
  # that binarize moved in (its .binarized: a run stopped before .done): another is other data,
  # which fairseq-preprocess would refuse to write over
  local out=$1 found
  [ -d "$out" ] && [ ! -f "$out/.binarized" ] || return 0
  found=$(find "$out" -maxdepth 1 -name 'dict*.txt' | head -1)
  [ -z "$found" ] || {
    echo "prepare.sh: $out holds binarized data ($found) that prepare.sh did not finish:" \
      "choose another OUT_DIR" >&2
    exit 1; }
}

binarize() {  # binarize OUT FAIRSEQ_PREPROCESS_ARGS...: into OUT/.binarizing, then moved into
  # OUT: a run stopped inside fairseq-preprocess left its dictionaries there, and every run after
  # it failed on them (FileExistsError); now it starts that step again
  local out=$1
  shift
  rm -rf "$out/.binarizing"
  fairseq-preprocess "$@" --destdir "$out/.binarizing"
  touch "$out/.binarized"  # the dictionaries in OUT are binarize's from here on
  mv "$out/.binarizing"/* "$out/"
  rmdir "$out/.binarizing"
}
