#!/bin/sh
# Faults paused: every recorded stream is there and every acknowledged message reads back intact.
exec workload composer eventually "$@"
