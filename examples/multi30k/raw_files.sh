# Sourced by the prepare.sh recipes: where Multi30k's gzipped raw files (SPLIT.LANG.gz) are.
# MULTI30K_DIR holds them; unset, each is downloaded into $TEXT from the public multi30k/dataset
# repository. The caller sets $splits ("raw name:fairseq split ...") and $TEXT. The checks are
# fairseq-san-loop multi30k-check's (fairseq_san.loop.prepared_data): check_ready says whether a
# finished OUT_DIR holds the data asked for, prepared from MULTI30K_DIR's text, check_unfinished
# that an unfinished one holds none that binarize did not write; binarize runs fairseq-preprocess
# so that a stopped run leaves none.
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
  fairseq-san-loop multi30k-check raw-files --multi30k-dir="${MULTI30K_DIR:-}" \
    --splits="$splits" -- "$@"
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

check_out_dir() {  # check_out_dir OUT: a folder mkdir can make or has made, not a file, and
  # one name: sentencepiece's input= and fairseq-preprocess's --validpref list files with ',',
  # fairseq-train's DATA lists data directories with ':'
  case $1 in
    *[,:]*) echo "prepare.sh: OUT_DIR $1 holds ',' or ':', which sentencepiece and fairseq read" \
      "between two files (or data directories): choose another" >&2; exit 2 ;;
  esac
  [ ! -e "$1" ] || [ -d "$1" ] || {
    echo "prepare.sh: OUT_DIR $1 is a file: give a folder (made when missing)" >&2; exit 2; }
}

check_vocab_size() {  # VOCAB_SIZE a positive decimal count, as its number: "08000" is 8000,
  # "abc" refused before any text is written
  VOCAB_SIZE=$(fairseq-san-loop multi30k-check vocab-size -- "$VOCAB_SIZE")
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
  # that binarize moved in (its .binarized): another is other data
  fairseq-san-loop multi30k-check unfinished -- "$1"
}

check_ready() {  # check_ready OUT FILE WHAT LANG...: a finished OUT holds WHAT (its FILE), of
  # VOCAB_SIZE pieces where given (GIVEN_VOCAB_SIZE), prepared from MULTI30K_DIR's text where set
  fairseq-san-loop multi30k-check ready --vocab-size="$GIVEN_VOCAB_SIZE" \
    --multi30k-dir="${MULTI30K_DIR:-}" --splits="$splits" -- "$@"
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
