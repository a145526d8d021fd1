#!/bin/sh
# Installs the Debian packages listed in the given lists (default
# tools/deps.txt: the build and the demo; make deps-test adds
# tools/deps-test.txt) when missing.  Runs as root (CI, fresh machines); as
# another user it only names what is missing and fails.
set -e
here=$(dirname "$0")
[ $# -gt 0 ] || set -- "$here/deps.txt"
need=""
have_pkg() { dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q "install ok installed"; }
for list in "$@"; do
    for p in $(sed -e 's/#.*//' "$list"); do
        have_pkg "$p" || need="$need $p"
    done
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
