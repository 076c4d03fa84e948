#!/bin/sh
# The seed 001 design: publishes one message at a time (no pipelining), reads and scales a stream of its own.
exec workload composer driver --in-flight 1 "$@"
