"""How often ``best_of_rows`` orders tied scores unlike torch.topk: bfloat16-rounded random
logits of the beam-20 shape (16 sentences x 20 x 8,000), log-softmax in float32 plus a score per
hypothesis, as the search ranks them; k = 8 and 40, 50 draws each.

    python docs/results/cpu-yardstick/topk-2026-11-29/ties.py
"""

import argparse

import torch

from fairseq_san.static_decoding.beam_search import best_of_rows


def main() -> None:
    torch.set_num_threads(2)
    differ = draws = 0
    for seed in range(50):
        generator = torch.Generator().manual_seed(seed)
        logits = (torch.randn(16 * 20, 8000, generator=generator) * 3).bfloat16().float()
        scores = torch.log_softmax(logits, -1).view(16, 20, 8000)
        scores = (scores + torch.randn(16, 20, 1, generator=generator)).view(16, -1)
        for k in (8, 40):
            expected = torch.topk(scores, k)
            values, columns = best_of_rows(scores, k)
            assert torch.equal(values, expected.values), "the values differ"
            draws += 1
            differ += int(not torch.equal(columns, expected.indices))
    print(f"columns ordered unlike torch.topk in {differ} of {draws} draws; values equal in all")


if __name__ == "__main__":
    argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    ).parse_args()  # no arguments: --help prints the docstring
    main()
