cd /work/main
export PATH=/work/main/.venv/bin:$PATH TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD=1
R=runs/multi30k.en-de
D=data-bin/multi30k.en-de
BASE=$R/iter0/checkpoints/checkpoint_best.pt
SAN=$R/iter1/checkpoints/checkpoint_best.pt
declare -A OVR=([baseline]="{}" [baseline+P1]="{'san_policy': '{\"decoder_self\": [6], \"decoder_encdec\": [6]}'}" [san-P1]="{}")
declare -A CKPT=([baseline]=$BASE [baseline+P1]=$BASE [san-P1]=$SAN)
for sys in baseline baseline+P1 san-P1; do
  for split in test test1; do
    out=$R/test-bleu/$sys/$split
    mkdir -p $out
    fairseq-generate $D --user-dir fairseq_san --path ${CKPT[$sys]} --model-overrides "${OVR[$sys]}" \
      --gen-subset $split --beam 4 --batch-size 16 --max-len-a 1.2 --max-len-b 10 \
      --required-batch-size-multiple 1 --post-process sentencepiece --results-path $out > /dev/null 2>&1
    echo "$sys $split"; fairseq-san-score $out/generate-$split.txt --reference $D/text/$split.raw.de -o $out/score.json
  done
done
