#!/bin/sh
# After every driver: the full verification of every recorded stream.
exec workload composer finally "$@"
