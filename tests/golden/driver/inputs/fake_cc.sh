#!/bin/sh
# A C compiler that compiles nothing: it writes a one-line file to its -o
# argument and exits 0 (golden tests that need every file step of ampc -o
# without a real build; CC=true would now be refused for writing nothing).
while [ $# -gt 0 ]; do
    if [ "$1" = -o ] && [ $# -gt 1 ]; then
        echo "not a program: written by tests/golden/driver/inputs/fake_cc.sh" > "$2" || exit 1
    fi
    shift
done
