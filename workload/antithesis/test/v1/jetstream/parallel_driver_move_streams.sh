#!/bin/sh
# Moves a running driver's stream to other servers by placement tags (some moves cancelled)
# for a random time; with no driver running, a stream of its own. A command of its own so
# Antithesis chooses which moves meet which publishing, scaling and faults.
exec workload composer moves "$@"
