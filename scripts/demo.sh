#!/usr/bin/env bash
# The demo: analyse NVDA until the approval gate, approve it from a second process by thread ID,
# show the published report, and say what to do next. Honours MA_DATA_DIR (default ./.market-analyst).
set -euo pipefail
MA=${MA:-.venv/bin/market-analyst}
PY="$(dirname "$MA")/python"
export MA_DATA_DIR=${MA_DATA_DIR:-$PWD/.market-analyst}

field() { "$PY" -c "import json,sys; print(json.load(sys.stdin)$1)"; }

echo "== 1. analyze NVDA (stops before publishing)"
thread=$("$MA" analyze NVDA --json | field '["thread_id"]')
"$MA" status "$thread"

echo
echo "== 2. approve it from a second process, by thread ID"
"$MA" approve "$thread" --user demo-approver --note "approved in the demo"

echo
echo "== 3. the thread now, and the archive"
"$MA" status "$thread"
"$MA" reports list
key=$("$MA" status "$thread" --json | field '["publication"]["key"]')
echo
echo "== 4. the published report ($MA_DATA_DIR/reports/$key.json)"
"$MA" reports show "$key"

echo
echo "== What next"
# The commands as you would type them here: the data directory named only when it is not the default.
run="$MA"
if [ "$MA_DATA_DIR" != "$PWD/.market-analyst" ]; then run="MA_DATA_DIR=$MA_DATA_DIR $MA"; fi
echo "The report is $MA_DATA_DIR/reports/$key.json. Read it again, list the runs, start another:"
echo "  $run reports show $key"
echo "  $run threads"
echo "  $run analyze MSFT    # the bundled snapshot also has AAPL, AMZN, GOOG, META, NFLX and TSLA"
if [ "$("$MA" db status --json | field '["running"]')" = True ]; then
  echo "The embedded PostgreSQL keeps running in $MA_DATA_DIR/postgres, so the next command starts at once."
  if [ "$run" = "$MA" ]; then
    echo "Stop it with: $run db stop    (make clean stops it too)"
  else
    echo "Stop it with: $run db stop"
  fi
fi
