#!/bin/sh
# Fetches Fashion-MNIST (60,000 training and 10,000 test 28x28 images, IDX
# files, gzipped) from Debian's dataset-fashion-mnist package into $1: copied
# from /usr/share/datasets/fashion-mnist when the package is installed, else
# unpacked from the downloaded package without installing it (no root
# needed).  The data sets are never committed.
set -e
dest=${1:?usage: fetch_fashion.sh DIR}
files="train-images-idx3-ubyte.gz train-labels-idx1-ubyte.gz t10k-images-idx3-ubyte.gz t10k-labels-idx1-ubyte.gz"
have() { for f in $files; do [ -s "$1/$f" ] || return 1; done; }
have "$dest" && exit 0
mkdir -p "$dest"
src=/usr/share/datasets/fashion-mnist
if ! have "$src"; then
    tmp=$(mktemp -d)
    trap 'rm -rf "$tmp"' EXIT
    ( cd "$tmp" && apt-get download dataset-fashion-mnist >/dev/null 2>&1 ) || {
        [ "$(id -u)" = 0 ] && apt-get update -qq && ( cd "$tmp" && apt-get download dataset-fashion-mnist )
    }
    dpkg -x "$tmp"/dataset-fashion-mnist_*.deb "$tmp/x"
    src="$tmp/x/usr/share/datasets/fashion-mnist"
    have "$src" || { echo "fetch_fashion: the IDX files are not in dataset-fashion-mnist" >&2; exit 1; }
fi
for f in $files; do cp "$src/$f" "$dest/"; done
echo "fetch_fashion: $dest"
