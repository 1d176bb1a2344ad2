#!/bin/sh
# A sandbox session: a fresh sync directory, the agent running on it, a shopper adding and
# removing recipes in Mealz while the host cart is edited by hand, and `status` showing that both
# sides converge. Usage: sandbox.sh [SYNC_DIR] (default: a new temporary directory).
# Needs basket-sync on the PATH (or $BASKET_SYNC) and jq. Exits 0 when the sides converge.
set -eu
bs=${BASKET_SYNC:-basket-sync}
dir=${1:-$(mktemp -d)}
"$bs" -C "$dir" init > /dev/null
"$bs" -C "$dir" watch 2> "$dir/agent.log" &
agent=$!
trap 'kill "$agent" 2>/dev/null || true' EXIT
until grep -q watching "$dir/agent.log"; do sleep 0.05; done

say() { printf '\n== %s\n' "$*"; }
# Waits until the agent has written N lines to a JSON Lines file.
wait_lines() { until [ "$(cat "$dir/$1" 2>/dev/null | wc -l)" -ge "$2" ]; do sleep 0.02; done; }
# The host applies the outbox (basket-sync's reference host), and the agent notifies the result.
host_applies() {
    before=$(wc -l < "$dir/notifications.jsonl")
    "$bs" -C "$dir" apply
    wait_lines notifications.jsonl $((before + 1))
}

say "the host cart, by hand: bread x1"
printf '{"products":[{"id":"bread","quantity":1}],"syncedThrough":0}\n' > "$dir/cart.json"
wait_lines notifications.jsonl 1

say "the shopper adds recipe 1 in Mealz: pasta +2, tomato +3"
"$bs" -C "$dir" push --id recipe-1 pasta=+2 tomato=+3
wait_lines outbox.jsonl 1
host_applies

say "the shopper adds recipe 2: pasta +1, basil +1"
"$bs" -C "$dir" push --id recipe-2 pasta=+1 basil=+1
wait_lines outbox.jsonl 2

say "meanwhile, in the host cart by hand: one tomato less, two more bread"
jq -c '(.products[] | select(.id == "tomato") | .quantity) -= 1 | (.products[] | select(.id == "bread") | .quantity) += 2' \
    "$dir/cart.json" > "$dir/.cart.tmp" && mv "$dir/.cart.tmp" "$dir/cart.json"
host_applies

say "the shopper removes recipe 1 in Mealz: pasta -2, tomato -3"
"$bs" -C "$dir" push --id recipe-1-removed pasta=-2 tomato=-3
wait_lines outbox.jsonl 3
host_applies

say "status"
"$bs" -C "$dir" status

say "converged?"
cart=$(jq -c '[.products[] | select(.id != "bread")] | sort_by(.id)' "$dir/cart.json")
mealz=$("$bs" -C "$dir" status --json | jq -c '[.mealz[] | select(.basis > 0) | {id, quantity: .basis}] | sort_by(.id)')
pending=$("$bs" -C "$dir" status --json | jq '.pending | length')
echo "host cart, Mealz lines: $cart"
echo "WebView's basis:        $mealz"
if [ "$cart" = "$mealz" ] && [ "$pending" -eq 0 ]; then
    echo "converged: both sides hold the same Mealz lines, nothing pending"
else
    echo "NOT converged" >&2
    exit 1
fi
