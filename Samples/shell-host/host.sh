#!/bin/sh
# A retail host written in POSIX shell and jq. It keeps its own cart in cart.json, applies the
# Mealz deltas itself (not through `basket-sync apply`) — the outbox records after its
# "syncedThrough", as `basket-sync wait` prints them from the database (so that a rotation of
# outbox.jsonl never hides one) — reports how far it got, and calls the payment commands at checkout.
#
#   host.sh sync                  apply the outbox records after syncedThrough, atomically
#   host.sh add SKU N             the shopper adds N units in the host's own UI
#   host.sh remove SKU N          the shopper removes N units
#   host.sh checkout ORDER TOTAL  payment started, payment handled, then the cart is emptied
#   host.sh clear                 empty the cart (the completion of a payment)
#
# The sync directory is $BASKET_SYNC_DIR (default: the current directory); the basket-sync
# binary is $BASKET_SYNC (default: basket-sync on the PATH).
set -eu

dir=${BASKET_SYNC_DIR:-.}
bs=${BASKET_SYNC:-basket-sync}
cart="$dir/cart.json"

# Every command that reads and rewrites the cart runs holding the host's cart lock (the lock
# `basket-sync apply` takes): a shopper's edit and the sync never lose each other's write.
case "${1:-}" in
sync|add|remove|clear)
    if [ -z "${HOST_SH_LOCKED:-}" ]; then
        HOST_SH_LOCKED=1 BASKET_SYNC_DIR="$dir" exec "$bs" lock --timeout 30 -- "$0" "$@"
    fi
    ;;
esac

[ -f "$cart" ] || printf '{"products":[],"syncedThrough":0}\n' > "$cart"

# Runs jq (its arguments, then the cart) and replaces the cart with the result the careful way — a
# temp file beside it, then a rename — only when jq succeeded: a failure leaves the cart as it was.
edit_cart() {
    tmp="$dir/.cart.json.$$"
    if jq "$@" "$cart" > "$tmp"; then
        mv "$tmp" "$cart"
    else
        rm -f "$tmp"
        echo "host: the cart was left as it was" >&2
        exit 1
    fi
}
trap 'rm -f "$dir/.cart.json.$$" "$dir/.records.$$" "$dir/.wait.err.$$"' EXIT

# The outbox records after seq $1, one per line (none: nothing); another failure stops the host.
records_after() {
    err="$dir/.wait.err.$$"
    rc=0
    "$bs" -C "$dir" wait --after "$1" --timeout 0 2>"$err" || rc=$?
    if [ "$rc" -ne 0 ] && [ "$rc" -ne 75 ]; then  # 75: no record after it yet
        cat "$err" >&2
        rm -f "$err"
        exit "$rc"
    fi
    rm -f "$err"
}

# Adds a signed delta to an id, clamped at 0. Its lines add up: the delta moves their sum — an
# increase on its first line, a decrease taken from its last line back — and a line brought to 0
# leaves the cart (a line that was at 0 already stays, untouched).
DELTA='def delta($id; $n):
  if any(.products[]; .id == $id) | not then
    (if $n > 0 then .products += [{id: $id, quantity: $n}] else . end)
  elif $n >= 0 then
    ([.products | to_entries[] | select(.value.id == $id) | .key] | first) as $i
    | .products[$i].quantity += $n
  else
    reduce ([.products | to_entries[] | select(.value.id == $id) | .key] | reverse[]) as $i
      ({c: ., rest: (0 - $n), gone: []};
       ([.rest, ([.c.products[$i].quantity, 0] | max)] | min) as $t
       | .c.products[$i].quantity -= $t | .rest -= $t
       | if $t > 0 and .c.products[$i].quantity == 0 then .gone += [$i] else . end)
    | .gone as $gone | .c | del(.products[$gone[]])
  end;'

case "${1:-}" in
sync)
    done=$(jq '.syncedThrough // 0' "$cart")
    # The records go through a file: however many there are (a host down for a while), no
    # argument grows past what the kernel takes.
    records="$dir/.records.$$"
    records_after "$done" > "$records"
    edit_cart --slurpfile records "$records" "$DELTA"'
        (.syncedThrough // 0) as $done
        | reduce ($records[] | select(.seq > $done)) as $r (.;
            (if $r.type == "updateBasket" then reduce $r.products[] as $p (.; delta($p.id; $p.quantity)) else . end)
            | .syncedThrough = $r.seq)'
    jq -r --argjson done "$done" 'select(.type == "redirectToCart" and .seq > $done) | .seq' "$records" |
        while read -r seq; do echo "redirectToCart (seq $seq): the shopper wants to see the cart"; done
    echo "host: cart synced through $(jq '.syncedThrough' "$cart")"
    ;;
add|remove)
    [ $# -eq 3 ] || { echo "usage: host.sh $1 SKU N" >&2; exit 64; }
    n=$3
    [ "$1" = remove ] && n=$((-$3))
    edit_cart --arg id "$2" --argjson n "$n" "$DELTA"' delta($id; $n)'
    ;;
checkout)
    [ $# -eq 3 ] || { echo "usage: host.sh checkout ORDER_ID TOTAL" >&2; exit 64; }
    "$bs" -C "$dir" payment-started --total "$3" --order-id "$2"
    "$bs" -C "$dir" handle-payment --total "$3" --order-id "$2" --then "$0" clear
    ;;
clear)
    edit_cart '.products = []'
    echo "host: order paid, cart emptied"
    ;;
*)
    sed -n '2,13s/^# \{0,1\}//p' "$0" >&2
    exit 64
    ;;
esac
