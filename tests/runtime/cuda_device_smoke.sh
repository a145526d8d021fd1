#!/bin/sh
# cuda_device_smoke.sh BIN - runs tests/runtime/cuda_device_smoke.c's
# program.  With a GPU it must pass (exit 0).  Without one it must fail to
# open the device cleanly: exit 3 and a message naming device.cu:LINE, the
# CUDA call and its error; that is printed as a loud SKIPPED line, since
# the GPU part did not run.
set -u
out=$("$1" 2>&1)
rc=$?
case $rc in
0) echo "$out" ;;
3)
    if ! echo "$out" | grep -q 'device\.cu:[0-9][0-9]*: cuda[A-Za-z]*(.*): .'; then
        echo "cuda_device_smoke: FAIL: without a GPU the message must name device.cu:LINE, the call and the error:"
        echo "$out"
        exit 1
    fi
    echo "SKIPPED: cuda_device_smoke's GPU part (the CUDA device against the CPU optimizer); it opened no device: ${out#*: no usable GPU: }"
    ;;
*)
    echo "$out"
    echo "cuda_device_smoke: FAIL (exit $rc)"
    exit 1
    ;;
esac
