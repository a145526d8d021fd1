#!/bin/sh
# Installs the Debian packages the build and the tests need, when missing.
# Runs as root (CI, fresh machines); as another user it only lists them.
set -e
need=""
have_pkg() { dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q "install ok installed"; }
for p in flex bison libcmocka-dev llvm-14-tools clang libclang-rt-14-dev valgrind make gcc \
         dataset-fashion-mnist; do
    have_pkg "$p" || need="$need $p"
done
[ -z "$need" ] && exit 0
echo "deps: installing$need"
if [ "$(id -u)" != 0 ]; then
    echo "deps: not root; install these by hand:$need" >&2
    exit 1
fi
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends $need >/dev/null
