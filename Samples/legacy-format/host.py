#!/usr/bin/env python3
"""A host whose cart format is fixed, driven by `basket-sync wait`.

Its cart is {"cartId", "items": [{"sku", "qty", "label"}], "updated", "progress"}; basket-sync.json
maps the keys (products → items, id → sku, quantity → qty, syncedThrough → progress). It applies
the outbox records basket-sync prints, in seq order: deltas on existing lines (clamped at 0, the
line removed at 0), new lines labelled from catalogue.json, redirects shown; then it writes the
whole cart at once (a temp file renamed over cart.json) with "progress" at the last seq applied.
Everything else in the cart (cartId, labels, fields it does not know) is kept as it was. It reads
and writes the cart holding the host's cart lock (flock on cart.json.lock, the lock `basket-sync
apply` and `basket-sync lock` take), so that another edit of the cart never crosses its own.

usage: host.py [--once] [--basket-sync PATH] SYNC_DIR
  --once   apply what waits now and exit (cron); without it, wait for records for ever.
"""
import fcntl
import json
import os
import subprocess
import sys
import tempfile
from datetime import datetime, timezone


def load_cart(path):
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except FileNotFoundError:
        return {"cartId": "new", "items": [], "progress": 0}


def write_cart(path, cart):
    """Writes the whole cart or nothing: basket-sync never reads a half-written cart."""
    directory = os.path.dirname(os.path.abspath(path))
    fd, temp = tempfile.mkstemp(prefix=".cart.", dir=directory)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump(cart, f, ensure_ascii=False, indent=2)
            f.write("\n")
            f.flush()
            os.fsync(f.fileno())
        os.rename(temp, path)
    except BaseException:
        os.unlink(temp)
        raise


def apply(cart, record, catalogue):
    """Applies one outbox record to the cart, in place."""
    if record["type"] == "redirectToCart":
        print(f"#{record['seq']}: the shopper asked to open the cart", flush=True)
    elif record["type"] == "updateBasket":
        items = cart.setdefault("items", [])
        for delta in record["products"]:
            sku, change = delta["id"], delta["quantity"]
            # A SKU's lines add up: the delta moves their sum — an increase on its first line,
            # a decrease taken from its last line back — never each line.
            lines = [item for item in items if item.get("sku") == sku]
            if not lines:
                if change > 0:
                    items.append({"sku": sku, "qty": change, "label": catalogue.get(sku, sku)})
            elif change > 0:
                lines[0]["qty"] = lines[0].get("qty", 0) + change
            else:
                rest = -change
                for line in reversed(lines):
                    taken = min(rest, max(0, line.get("qty", 0)))
                    line["qty"] = line.get("qty", 0) - taken
                    rest -= taken
                    # Brought to 0 by this delta: it leaves; a line at 0 already stays.
                    if taken > 0 and line["qty"] == 0:
                        items[:] = [item for item in items if item is not line]
        print(f"#{record['seq']}: applied {len(record['products'])} line(s)", flush=True)
    cart["progress"] = record["seq"]


def main(argv):
    once = "--once" in argv
    argv = [a for a in argv if a != "--once"]
    tool = "basket-sync"
    if "--basket-sync" in argv:
        index = argv.index("--basket-sync")
        tool = argv[index + 1]
        del argv[index:index + 2]
    if len(argv) != 1:
        print(__doc__, file=sys.stderr)
        return 64
    directory = argv[0]
    cart_path = os.path.join(directory, "cart.json")
    try:
        with open(os.path.join(directory, "catalogue.json"), encoding="utf-8") as f:
            catalogue = json.load(f)
    except FileNotFoundError:
        catalogue = {}  # new lines are labelled by their SKU
    while True:
        # wait prints the records after the cart's progress, as JSON Lines; 75: none (--timeout 0).
        waited = subprocess.run([tool, "-C", directory, "wait"] + (["--timeout", "0"] if once else []),
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE if once else None, text=True)
        if waited.returncode == 75 and once:
            return 0
        if waited.returncode != 0:
            sys.stderr.write(waited.stderr or "")
            return waited.returncode
        # Read, applied and written under the host's cart lock: an edit holding it (the shop's
        # own, through `basket-sync lock`) is never lost between this read and this write.
        with open(cart_path + ".lock", "a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            cart = load_cart(cart_path)
            for line in waited.stdout.splitlines():
                record = json.loads(line)
                if record["seq"] > cart.get("progress", 0):
                    apply(cart, record, catalogue)
            cart["updated"] = datetime.now(timezone.utc).isoformat(timespec="seconds").replace("+00:00", "Z")
            write_cart(cart_path, cart)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
