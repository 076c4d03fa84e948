#!/bin/sh
# Publishes, reads and scales a stream of its own for a random time; records what was acknowledged.
exec workload composer driver "$@"
