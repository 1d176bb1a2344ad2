#!/bin/sh
# Plays a whole session against Samples/shell-host/host.sh with `basket-sync sync` as the agent
# (one pass after each step, as cron would, so that the run is the same every time), then prints
# the final cart and the payment records. Usage: demo.sh [SYNC_DIR] (default: a temporary one).
set -eu
here=$(cd "$(dirname "$0")" && pwd)
bs=${BASKET_SYNC:-basket-sync}
export BASKET_SYNC="$bs"
BASKET_SYNC_DIR=${1:-$(mktemp -d)}
export BASKET_SYNC_DIR
host="$here/host.sh"
step() { "$bs" -C "$BASKET_SYNC_DIR" sync > /dev/null; }

"$bs" -C "$BASKET_SYNC_DIR" init > /dev/null
"$bs" -C "$BASKET_SYNC_DIR" set-store store-42 --mode retailer
"$host" add bread 1 && step                                  # the shopper's own product
"$bs" -C "$BASKET_SYNC_DIR" push pasta=+2 tomato=+3 > /dev/null   # Mealz: a recipe
step && "$host" sync && step                                 # the host applies, reports syncedThrough
"$host" remove tomato 1 && step                              # the shopper removes a tomato
"$bs" -C "$BASKET_SYNC_DIR" push --state pasta=2 tomato=2 basil=1 > /dev/null  # the WebView's basket
step && "$host" sync && step
echo "cart before checkout: $(jq -c '.products' "$BASKET_SYNC_DIR/cart.json")"
"$bs" -C "$BASKET_SYNC_DIR" status | sed -n '/Mealz-related/,/pending batches/p'
"$host" checkout order-7 23.40 > /dev/null
step
echo "cart after checkout: $(jq -c '.products' "$BASKET_SYNC_DIR/cart.json")"
echo "payments: $(jq -c '[.type, .status, .mealzProducts]' "$BASKET_SYNC_DIR/payments.jsonl" | tr '\n' ' ')"
