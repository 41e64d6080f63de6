#!/usr/bin/env bash
# The demo: analyse NVDA until the approval gate, approve it from a second process by thread ID,
# and show the published report. Honours MA_DATA_DIR (default ./.market-analyst).
set -euo pipefail
MA=${MA:-.venv/bin/market-analyst}
export MA_DATA_DIR=${MA_DATA_DIR:-$PWD/.market-analyst}

echo "== 1. analyze NVDA (stops before publishing)"
json=$("$MA" analyze NVDA --json)
thread=$(printf '%s' "$json" | "$(dirname "$MA")/python" -c 'import json,sys; print(json.load(sys.stdin)["thread_id"])')
"$MA" status "$thread"

echo
echo "== 2. approve it from a second process, by thread ID"
"$MA" approve "$thread" --user demo-approver --note "approved in the demo"

echo
echo "== 3. the thread now, and the archive"
"$MA" status "$thread"
"$MA" reports list
key=$("$MA" status "$thread" --json | "$(dirname "$MA")/python" -c 'import json,sys; print(json.load(sys.stdin)["publication"]["key"])')
echo
echo "== 4. the published report ($MA_DATA_DIR/reports/$key.json)"
"$MA" reports show "$key"
