# The decoding benchmark of docs/results.md (Multi30k En->De test_2016_flickr), on an idle machine.
# The rerun on the idle machine (2026-11-26 05:38-05:50 UTC) ran the first two commands with
# TAG=-rerun, which writes runs/multi30k.en-de/bench-beam4-rerun and bench-beams-rerun instead.
cd /work/main
export PATH=/work/main/.venv/bin:$PATH TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD=1
R=runs/multi30k.en-de TAG=${TAG:-}
BASE=$R/iter0/checkpoints/checkpoint_best.pt                     # baseline, 660 updates
SAN=runs/multi30k.en-de-full/iter1/checkpoints/checkpoint_best.pt   # SAN {6}/{6}, 660 updates
AANSAN=runs/multi30k.en-de-aan-san/iter0/checkpoints/checkpoint_best.pt  # AAN + enc-dec {6}
FAST='{"san_fast_decoding": true}'
U='{"san_policy": "{\"decoder_self\": [1, 5], \"decoder_encdec\": [3, 3]}"}'
fairseq-san-bench --data data-bin/multi30k.en-de --subset test --max-sentences 128 \
  --beams 4 --cache-beams 4 20 --repeats 3 --max-len-a 1.2 --max-len-b 10 \
  --system "baseline=$BASE" --system "baseline+fast=$BASE:$FAST" \
  --system "san=$SAN" --system "san+fast=$SAN:$FAST" \
  --system "aan-san=$AANSAN" --system "aan-san+fast=$AANSAN:$FAST" \
  --system "base+1.5-3.3-decode-time=$BASE:$U" \
  --out-dir $R/bench-beam4$TAG > $R/bench-beam4$TAG.log 2>&1
fairseq-san-bench --data data-bin/multi30k.en-de --subset test --max-sentences 32 \
  --beams 1 4 8 12 16 20 --modes fixed --cache-beams --no-profile --repeats 3 \
  --system "baseline=$BASE" --system "baseline+fast=$BASE:$FAST" \
  --system "san=$SAN" --system "san+fast=$SAN:$FAST" --system "aan-san+fast=$AANSAN:$FAST" \
  --out-dir $R/bench-beams$TAG > $R/bench-beams$TAG.log 2>&1
# Without the attention cache (run on 2026-11-26 at 00:30, before the two commands above).
fairseq-san-bench --data data-bin/multi30k.en-de --subset test --max-sentences 32 \
  --beams 4 --modes natural --cache-beams 4 --no-profile --repeats 3 --max-len-a 1.2 --max-len-b 10 \
  --system "baseline=$BASE" --system "baseline-cache=$BASE:{\"san_no_cache\": true}" \
  --out-dir $R/bench-nocache > $R/bench-nocache.log 2>&1
