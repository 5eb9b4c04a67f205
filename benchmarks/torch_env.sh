#!/bin/sh
# Prints the environment the PyTorch reference (benchmarks/torch_gpt2.py) needs, to be
# evaluated by the benchmark runner:  eval "$(benchmarks/torch_env.sh)"
# Debian's torch links libblas.so.3 through the alternatives system, which can point
# at the reference BLAS (~50x slower); put the OpenMP OpenBLAS first instead so it
# also shares torch's libgomp thread pool. OPENBLAS_* variables are left untouched.
dir=""
if command -v dpkg >/dev/null 2>&1; then
  dir=$(dpkg -L libopenblas0-openmp 2>/dev/null | grep '/libopenblas\.so\.0$' | head -n 1)
  dir=${dir%/*}
fi
[ -n "$dir" ] || dir=/usr/lib/x86_64-linux-gnu/openblas-openmp
if [ ! -e "$dir/libblas.so.3" ]; then
  echo "torch_env.sh: no OpenMP OpenBLAS in $dir (apt-get install libopenblas0-openmp)" >&2
  exit 1
fi
echo "export LD_LIBRARY_PATH=$dir\${LD_LIBRARY_PATH:+:\$LD_LIBRARY_PATH}"
