#!/bin/sh
# Evacuates a peer of a running driver's stream, or a whole server, for a random time; with
# no driver running, a stream of its own. A command of its own so Antithesis chooses which
# evacuations meet which publishing, scaling and faults.
exec workload composer evacuations "$@"
