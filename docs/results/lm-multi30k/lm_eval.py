"""The measurements of docs/results/lm-multi30k, one system per process.

    python docs/results/lm-multi30k/lm_eval.py nll CHECKPOINT DATA -o OUT.json
    python docs/results/lm-multi30k/lm_eval.py speed CHECKPOINT DATA --batch B \
        [--decoding fairseq|static] -o OUT.json

``nll``: the natural-log loss of every test sentence (start token, sentence, end token: what
fairseq-eval-lm --sample-break-mode eos scores), for the paired bootstrap of table.py.
``speed``: greedy generation through the task's build_generator and inference_step (as
fairseq-generate and the hub call them) with fairseq's own SequenceGenerator (``--decoding
fairseq``) or the static decoder (``static``: ``--san-decoding static``): prompts of 16 tokens
(the first test sentences of at least 16 tokens, cut to 16), 64 generated tokens each (min_len
forbids an earlier end), batch B; one warm-up batch, then the batches of 64 prompts timed 3 times
(the fastest counts: the machine is shared). The generated tokens are kept, so that table.py can
compare the two decoders' outputs.
"""

import argparse
import json
import time

import torch
from fairseq import checkpoint_utils

import fairseq_san  # noqa: F401  (registers the model and the task)
from fairseq_san.benchmark.machine import processor

PROMPT, GENERATED, PROMPTS, REPEATS = 16, 64, 64, 3


def load(checkpoint: str, data: str):
    models, _, task = checkpoint_utils.load_model_ensemble_and_task(
        [checkpoint], arg_overrides={"data": data}
    )
    return models[0].eval(), task


def test_sentences(data: str, dictionary):
    with open(f"{data}/text/test.en", encoding="utf-8") as handle:
        return [dictionary.encode_line(line, add_if_not_exist=False).long() for line in handle]


def nll(checkpoint: str, data: str) -> dict:
    model, task = load(checkpoint, data)
    dictionary = task.source_dictionary
    losses, tokens = [], []
    with torch.no_grad():
        for sentence in test_sentences(data, dictionary):
            source = torch.cat([torch.tensor([dictionary.eos()]), sentence[:-1]]).unsqueeze(0)
            lprobs = model.get_normalized_probs(model(source), log_probs=True)[0]
            losses.append(-lprobs.gather(1, sentence.unsqueeze(1)).sum().item())
            tokens.append(len(sentence))
    return {"checkpoint": checkpoint, "nll": losses, "tokens": tokens}


def speed(checkpoint: str, data: str, batch: int, decoding: str) -> dict:
    model, task = load(checkpoint, data)
    dictionary = task.source_dictionary
    prompts = [s[:PROMPT] for s in test_sentences(data, dictionary) if len(s) - 1 >= PROMPT]
    prompts = prompts[:PROMPTS]
    gen_args = argparse.Namespace(beam=1, sampling=False, max_len_a=0, max_len_b=PROMPT + GENERATED,
                                  min_len=PROMPT + GENERATED, nbest=1,
                                  san_decoding=decoding)  # fmt: skip
    generator = task.build_generator([model], gen_args)

    def run(rows):
        start = torch.full((len(rows), 1), dictionary.eos())
        sample = {"net_input": {"src_tokens": torch.cat([start, torch.stack(rows)], 1),
                                "src_lengths": torch.full((len(rows),), PROMPT + 1)}}  # fmt: skip
        hypos = task.inference_step(generator, [model], sample)
        lengths = {len(h[0]["tokens"]) for h in hypos}
        assert lengths == {PROMPT + GENERATED + 1}, lengths  # prompt, generated, end token
        return [h[0]["tokens"][PROMPT:-1].tolist() for h in hypos]

    run(prompts[:batch])  # warm-up
    times = []
    for _ in range(REPEATS):
        outputs, started = [], time.perf_counter()
        for first in range(0, len(prompts), batch):
            outputs += run(prompts[first : first + batch])
        times.append(time.perf_counter() - started)
    generated = sum(map(len, outputs))
    return {
        "checkpoint": checkpoint, "batch": batch, "decoding": decoding, "outputs": outputs,
        "generated_tokens": generated,
        "seconds": times, "tokens_per_second": generated / min(times),
        "threads": torch.get_num_threads(), "processor": processor()[0],
    }  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("what", choices=("nll", "speed"))
    parser.add_argument("checkpoint")
    parser.add_argument("data")
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--decoding", choices=("fairseq", "static"), default="fairseq")
    parser.add_argument("-o", "--output", required=True)
    args = parser.parse_args()
    torch.manual_seed(1)
    if args.what == "nll":
        result = nll(args.checkpoint, args.data)
    else:
        result = speed(args.checkpoint, args.data, args.batch, args.decoding)
    with open(args.output, "w", encoding="utf-8") as out:
        json.dump(result, out)


if __name__ == "__main__":
    main()
