#!/bin/sh
# An operator beside the drivers: makes the leaders of the drivers' streams (or the meta
# leader) step down, for a random time. A parallel driver, not a singleton: a singleton runs
# alone in its branch, with no driver's stream to act on.
exec workload composer operator "$@"
