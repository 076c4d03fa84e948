#!/bin/sh
# Not a Test Composer command (helper_ is ignored): stands in for $ANTITHESIS_STOP_FAULTS
# when scripts/composer-session injects the faults. Records on the shared volume until when
# faults must stay off (stop-faults-until) and the time paused so far (stop-faults-total).
state="${WORKLOAD_STATE:-/state}"
now=$(date +%s)
until=$((now + $1))
old=$(cat "$state/stop-faults-until" 2>/dev/null || echo 0)
[ "$until" -le "$old" ] && exit 0
from=$old
[ "$from" -lt "$now" ] && from=$now
total=$(cat "$state/stop-faults-total" 2>/dev/null || echo 0)
echo $((total + until - from)) > "$state/stop-faults-total"
echo "$until" > "$state/stop-faults-until"
