#!/bin/sh
# An operator: makes the leaders of the streams running drivers use step down, for a random time.
exec workload composer operator "$@"
