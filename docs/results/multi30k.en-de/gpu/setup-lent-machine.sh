#!/usr/bin/env bash
# Set-up on the lent GPU machine, which has PyTorch (CUDA) but no package registry: fairseq
# (fairseq-fixed 0.12.3.1, copied from this project's .venv, with its two Cython modules compiled
# there), hydra-core, omegaconf and antlr4 travel in .gpu/site, the bitarray wheel in .gpu/whl.
# Source it: it exports PYTHONPATH and puts the console scripts this project uses on PATH.
#
#   built here:  cp -r .venv/lib/python3.11/site-packages/{fairseq,fairseq_cli,hydra,omegaconf,antlr4} .gpu/site
#                (less __pycache__ and *.so) + fairseq/data/*_fast.pyx from the fairseq-fixed sdist;
#                pip download --only-binary=:all: --python-version 3.12 ... -d .gpu/whl bitarray==3.12.3
SITE=/tmp/site BIN=/tmp/bin
if [ ! -f "$SITE/.done" ]; then  # once per machine
python3 -m pip install -q --no-index --no-deps --no-compile --target "$SITE" .gpu/whl/*.whl
cp -r .gpu/site/. "$SITE"/
(cd "$SITE" && python3 - <<'PY'
import numpy
from Cython.Build import cythonize
from setuptools import Extension, setup
modules = ["fairseq.data.data_utils_fast", "fairseq.data.token_block_utils_fast"]
extensions = [Extension(m, [m.replace(".", "/") + ".pyx"], include_dirs=[numpy.get_include()],
                        language="c++", extra_compile_args=["-std=c++11"]) for m in modules]
setup(script_args=["-q", "build_ext", "--inplace"], ext_modules=cythonize(extensions, quiet=True))
PY
) > /tmp/cython.log 2>&1 || { cat /tmp/cython.log; return 1; }
touch "$SITE/.done"
fi
export PYTHONPATH=$SITE:$PWD TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD=1
mkdir -p "$BIN"
wrap() {  # wrap NAME MODULE FUNCTION: a console script like pip's
  printf '#!/bin/sh\nexec python3 -c "import sys; from %s import %s; sys.exit(%s())" "$@"\n' "$2" "$3" "$3" > "$BIN/$1"
  chmod +x "$BIN/$1"
}
for tool in train generate validate; do wrap fairseq-$tool fairseq_cli.$tool cli_main; done
for tool in policy score loop bench; do wrap fairseq-san-$tool fairseq_san.cli.$tool main; done
rm -f "$BIN/python" && printf '#!/bin/sh\nexec %s "$@"\n' "$(command -v python3)" > "$BIN/python" && chmod +x "$BIN/python"
export PATH=$BIN:$PATH
