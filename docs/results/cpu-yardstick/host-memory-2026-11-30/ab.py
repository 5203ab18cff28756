"""ms and page faults a step of a decoder with glibc's default malloc thresholds and with them
raised (mmap threshold 1 GiB, trim threshold 2 GiB: what commit 5901ee1's ``keep_freed_memory``
set, reverted since), each run a process of its own, the two alternating round after round (the
setting is process-wide and cannot be undone). The step timer's synthetic batch at
the Multi30k vocabulary's size (7,796 words): ``transformer_san_small``, random weights,
16 sentences, 14 tokens + EOS.

    PYTHONPATH=. python docs/results/cpu-yardstick/host-memory-2026-11-30/ab.py ROUNDS BEAM DECODER...

DECODER: ``fairseq`` (fairseq's SequenceGenerator, the baseline model) or a static decoder of
``fairseq-san-bench steps`` (``static-int8``: SAN {6}/{6}). "default": glibc's moving thresholds
as the process starts with them; "kept": the two raised before decoding. (ab.txt was made with
5901ee1, whose static decoder raised them itself and whose "default" runs replaced that call by a
no-op: the same two settings; and with a loop of its own: two warm-ups, then the four decodes
timed as one. Now the step timer's ``time_rounds`` times them: one warm-up, the median of four.)
"""

import argparse
import ctypes
import statistics
import subprocess
import sys

VOCABULARY, BATCH, LENGTH, DECODES = 7796, 16, 14, 4
M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3  # mallopt's parameters (glibc's malloc.h)


def keep_freed_memory() -> None:
    """glibc's mmap and trim thresholds raised: freed buffers stay in the heap for reuse."""
    mallopt = ctypes.CDLL(None).mallopt
    mallopt.argtypes, mallopt.restype = (ctypes.c_int, ctypes.c_int), ctypes.c_int
    assert mallopt(M_MMAP_THRESHOLD, 1 << 30) == 1 and mallopt(M_TRIM_THRESHOLD, 1 << 31) == 1


def measure(decoder: str, beam: int, kept: bool) -> None:
    """One decoder's ms and page faults a step, printed as one line (the child process)."""
    import torch

    from fairseq_san.benchmark import step_timer

    if kept:
        keep_freed_memory()
    torch.set_num_threads(2)
    dictionary = step_timer.dictionary_of(VOCABULARY)
    sample = next(iter(step_timer.batches(dictionary, 1, BATCH, 16)))
    policy = "baseline" if decoder == "fairseq" else "san-6-6"
    model = step_timer.build_model(
        "transformer_san_small", step_timer.POLICIES[policy], dictionary
    )
    generator = step_timer.make_generator(decoder, model, dictionary, beam, LENGTH)
    times, faults = step_timer.time_rounds({decoder: generator}, [sample], DECODES, LENGTH + 1)
    print(f"{statistics.median(times[decoder]):.3f} {statistics.median(faults[decoder]):.0f}")


def run(decoder: str, beam: int, kept: bool) -> tuple:
    """(ms, page faults) a step of one child process."""
    command = [sys.executable, __file__, "--child", decoder, str(beam), str(int(kept))]
    result = subprocess.run(command, capture_output=True, text=True, check=True)
    ms, faults = result.stdout.split()[-2:]
    return float(ms), float(faults)


def main(rounds: int, beam: int, decoders: list) -> None:
    for decoder in decoders:
        runs = {False: [], True: []}
        for _ in range(rounds):
            for kept in (False, True):
                runs[kept].append(run(decoder, beam, kept))
        ratios = [default[0] / kept[0] for default, kept in zip(runs[False], runs[True])]
        for kept in (False, True):
            ms = [each[0] for each in runs[kept]]
            faults = [each[1] for each in runs[kept]]
            print(
                f"{decoder} beam {beam} {'kept   ' if kept else 'default'}: ms a step "
                f"{' '.join(f'{m:.2f}' for m in ms)} (median {statistics.median(ms):.2f}), "
                f"page faults a step {statistics.median(faults):.0f}"
            )
        print(
            f"{decoder} beam {beam} default / kept, per round: "
            f"{' '.join(f'{r:.2f}' for r in ratios)} (median {statistics.median(ratios):.2f})",
            flush=True,
        )


if __name__ == "__main__":
    if sys.argv[1:2] == ["--child"]:  # run()'s child process: --child DECODER BEAM KEPT
        measure(sys.argv[2], int(sys.argv[3]), sys.argv[4] == "1")
    else:
        parser = argparse.ArgumentParser(
            description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
        )
        parser.add_argument("rounds", type=int, metavar="ROUNDS")
        parser.add_argument("beam", type=int, metavar="BEAM")
        parser.add_argument("decoders", nargs="+", metavar="DECODER")
        args = parser.parse_args()
        main(args.rounds, args.beam, args.decoders)
