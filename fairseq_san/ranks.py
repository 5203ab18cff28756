"""Whether the ranks a launcher starts on a machine can meet on its GPUs. Pure Python: read by
fairseq-train's checks of torchrun's ranks (``fairseq_fixes.world_size``) and, before
anything starts, by the learn-to-share recipes' ``--launcher`` (``loop.recipe_options``)."""


def nccl_ranks_problem(ranks: int, gpus: int) -> str:
    """Why ``ranks`` ranks on a machine of ``gpus`` GPUs (fewer) cannot train with NCCL, and the
    way out: NCCL stops at "Duplicate GPU detected" with two ranks on one GPU."""
    return (
        f"{ranks} ranks on a machine with {gpus} GPU{'s' if gpus > 1 else ''}: fairseq-train "
        f"puts rank R on GPU R % {gpus}, and NCCL (--distributed-backend nccl, fairseq's "
        f"default) refuses two ranks on one GPU; start at most {gpus} a machine "
        "(--nproc_per_node), or pass --distributed-backend gloo"
    )
