"""fairseq-san: Shared Attention Networks (Xiao et al., IJCAI 2019) as a fairseq plugin."""

from setuptools import find_packages, setup

setup(
    name="fairseq-san",
    version="0.1.0",
    description="Shared Attention Networks for fast Transformer decoding, as a fairseq --user-dir plugin",
    long_description=open("README.md", encoding="utf-8").read(),
    long_description_content_type="text/markdown",
    packages=find_packages(include=["fairseq_san", "fairseq_san.*"]),
    python_requires=">=3.9",  # list[int] annotations (policy.py); tested on 3.11 and 3.12
    install_requires=[
        # fairseq 0.12.2 from PyPI does not import on Python >= 3.11; fairseq-fixed installs
        # the `fairseq` package from fairseq main with only the dataclass fix applied.
        'fairseq-fixed==0.12.3.1; python_version >= "3.11"',
        'fairseq>=0.12.2; python_version < "3.11"',
        "torch>=2.6",  # the first whose torch.load is safe by default (checkpoints.py)
        "numpy",
        "sacrebleu",
        "sentencepiece",
        "matplotlib",
        "tqdm",
    ],
    extras_require={
        "test": ["pytest", "pytest-xdist"],
        # the benchmark's context row: the baseline converted to CTranslate2
        "ctranslate2": ["ctranslate2>=4"],
    },
    entry_points={
        "console_scripts": [
            "fairseq-san-policy = fairseq_san.cli.policy:main",
            "fairseq-san-plot-js = fairseq_san.cli.plot_js:main",
            "fairseq-san-spm = fairseq_san.cli.subwords:main",
            "fairseq-san-bench = fairseq_san.cli.bench:main",
            "fairseq-san-score = fairseq_san.cli.score:main",
            "fairseq-san-loop = fairseq_san.cli.loop:main",
            "fairseq-san-cpu-ranks = fairseq_san.cli.cpu_ranks:main",
            "fairseq-san-average = fairseq_san.cli.average:main",
        ],
    },
)
