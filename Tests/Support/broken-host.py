#!/usr/bin/env python3
"""A one-shot host apply for check-host's tests, correct but for the one rule MODE breaks.

usage: broken-host.py MODE   (run in the sync directory; default key names)
MODE: good, twice, noclamp, losefields, inplace, nosynced, toofar, reverse, skip,
      raceack (claims what the outbox holds when it writes, not what it read), noredirect (does
      not count a redirect in syncedThrough), background (good,
      but leaves a child running), linkout (makes the cart a link to a file outside), nothing
      (exits 0 at once, the cart never written), net (sums each SKU's deltas, then clamps),
      noneg (ignores negative deltas), ackfirst (writes syncedThrough in a cart of its own, then
      the lines 20 ms later), linenumber (takes the outbox's lines after line number
      syncedThrough, in outbox.jsonl alone), acklast (writes the lines in a cart of its own,
      then syncedThrough 20 ms later), normalize (rewrites every id to Unicode NFC: the
      cart's and the records'), frozen (applies the records after the cart's syncedThrough
      but writes that syncedThrough back unchanged: every run applies them all again),
      backwards (a run with nothing new writes syncedThrough one lower), claimhalf (applies the
      first half of the records it read and claims them all); skip leaves record 2 out when a
      later record is applied (a hole: leaving the last records out is claiming too far);
      skipmany leaves records 3, 8, 13, … out when a later delta is applied; fails (exits 1 at
      once, the cart never written); huge (good, but its cart carries 100 KB more: over a
      limits.maxFileBytes of 64 KiB); everyline (moves each line of an id by the delta, not
      their sum); trim (takes ids with the spaces around them cut); lastline (puts an increase
      on an id's last line); firstdecrease (takes a decrease from an id's first line on);
      dropzero (removes an id's lines at 0 it did not bring there); firstnonzero (puts an
      increase on an id's first line above 0); keepzero (keeps a line it brought to 0: a good
      host too, as docs/integrating.md allows); reorder
      (writes the cart's ids in reverse order, each id's lines in theirs)
A good host moves the sum of an id's lines: an increase on its first line, a decrease taken
from its last line back.
"""
import subprocess
import time
import unicodedata
import json
import os
import sys

mode = sys.argv[1]
if mode == "nothing":
    sys.exit(0)
if mode == "fails":
    sys.exit(1)
if mode == "garbage":
    # Only ever writes, atomically, a cart that does not parse.
    with open(".cart.tmp", "w", encoding="utf-8") as f:
        f.write('{"products":[{"id":')
    os.rename(".cart.tmp", "cart.json")
    sys.exit(0)
with open("cart.json", encoding="utf-8") as f:
    cart = json.load(f)
progress_file = ".host-progress"
if mode == "nosynced":
    # It keeps its progress to itself, and never tells basket-sync.
    done = int(open(progress_file).read()) if os.path.exists(progress_file) else 0
else:
    done = 0 if mode == "twice" else cart.get("syncedThrough", 0)
records = []
# The rotated files first (outbox.jsonl.N … outbox.jsonl.1), then the live one; linenumber reads
# the live one alone.
names = sorted((n for n in os.listdir(".") if n.startswith("outbox.jsonl.") and n[13:].isdigit()), key=lambda n: -int(n[13:]))
lines_read = []
for name in ([] if mode == "linenumber" else names) + ["outbox.jsonl"]:
    with open(name, encoding="utf-8") as f:
        lines_read += [json.loads(line) for line in f if line.endswith("\n")]
if mode == "linenumber":
    records = lines_read[done:]
else:
    records = [record for record in lines_read if record["seq"] > done]
if mode == "reverse":
    records.reverse()
lines = cart["products"]
if mode == "trim":
    for line in lines:
        line["id"] = line["id"].strip()
    records = [dict(r, products=[dict(d, id=d["id"].strip()) for d in r.get("products", [])]) for r in records]
if mode == "normalize":
    for line in lines:
        line["id"] = unicodedata.normalize("NFC", line["id"])
    records = [dict(r, products=[dict(d, id=unicodedata.normalize("NFC", d["id"])) for d in r.get("products", [])]) for r in records]
if mode == "net":
    sums = {}
    for record in records:
        for delta in record.get("products", []) if record["type"] == "updateBasket" else []:
            sums[delta["id"]] = sums.get(delta["id"], 0) + delta["quantity"]
    records = [{"seq": 0, "type": "updateBasket", "products": [{"id": k, "quantity": v} for k, v in sums.items()]}] + \
        [dict(r, type="counted") for r in records]
if mode == "noneg":
    records = [dict(r, products=[d for d in r.get("products", []) if d["quantity"] > 0]) for r in records]
if mode == "ackfirst":
    early = dict(cart, syncedThrough=max([r["seq"] for r in records], default=done))
    with open(".cart.tmp", "w", encoding="utf-8") as f:
        f.write(json.dumps(early))
    os.rename(".cart.tmp", "cart.json")
    time.sleep(0.02)
last_read = max([r["seq"] for r in records], default=done)
if mode == "claimhalf":
    records = records[:(len(records) + 1) // 2]
for record in records:
    if record["type"] != "updateBasket" or (mode == "skip" and record["seq"] == 2 and last_read > 2):
        continue
    if mode == "skipmany" and record["seq"] % 5 == 3 and any(r["seq"] > record["seq"] and r["type"] == "updateBasket" for r in records):
        continue
    for delta in record["products"]:
        held = [l for l in lines if l["id"] == delta["id"]]
        if not held:
            if delta["quantity"] > 0 or mode == "noclamp":
                lines.append({"id": delta["id"], "quantity": delta["quantity"]})
            continue
        if mode == "everyline":
            for line in held:
                line["quantity"] = max(0, line["quantity"] + delta["quantity"])
            continue
        if delta["quantity"] >= 0:
            line = held[-1 if mode == "lastline" else 0]
            if mode == "firstnonzero":
                line = next((l for l in held if l["quantity"] > 0), held[0])
            line["quantity"] += delta["quantity"]
            # Brought back before the run ends: it stays.
            if line["quantity"] != 0:
                line.pop("gone", None)
            continue
        # A decrease from the last line back, each line down to 0 at most (noclamp: what is
        # left goes below 0 on the first line).
        rest = -delta["quantity"]
        for line in held if mode == "firstdecrease" else reversed(held[1:] if mode == "noclamp" else held):
            taken = min(rest, max(0, line["quantity"]))
            line["quantity"] -= taken
            rest -= taken
            if taken > 0 and line["quantity"] == 0 and mode != "keepzero":
                line["gone"] = True
        if mode == "noclamp":
            held[0]["quantity"] -= rest
# A line brought to 0 leaves; one at 0 already stays (a new line never starts at 0).
# A line brought to 0 leaves; one at 0 the records did not touch stays (dropzero: goes too).
cart["products"] = [l for l in lines if not l.pop("gone", False) and (mode != "dropzero" or l["quantity"] != 0)]
last = max([r["seq"] for r in records if mode != "noredirect" or r["type"] == "updateBasket"], default=done)
if mode == "losefields":
    cart = {"products": [{"id": l["id"], "quantity": l["quantity"]} for l in cart["products"]]}
if mode == "nosynced":
    cart.pop("syncedThrough", None)
    with open(progress_file, "w") as f:
        f.write(str(last))
elif mode == "toofar":
    # Far beyond: one record more than it read would look like one record skipped.
    cart["syncedThrough"] = last + 1000
elif mode == "frozen":
    cart["syncedThrough"] = done
elif mode == "backwards" and not records:
    cart["syncedThrough"] = max(0, done - 1)
elif mode == "claimhalf":
    cart["syncedThrough"] = max(last_read, done)
else:
    cart["syncedThrough"] = max(last, cart.get("syncedThrough", 0))
if mode == "huge":
    cart["padding"] = "x" * 100_000
if mode == "reorder":
    # The ids in reverse order, each id's lines in theirs.
    ids = list(dict.fromkeys(line["id"] for line in cart["products"]))
    cart["products"] = [line for i in reversed(ids) for line in cart["products"] if line["id"] == i]
text = json.dumps(cart, ensure_ascii=False)
if mode == "raceack":
    time.sleep(0.3)
    with open("outbox.jsonl", encoding="utf-8") as f:
        cart["syncedThrough"] = max([json.loads(l)["seq"] for l in f if l.endswith("\n")], default=0)
    text = json.dumps(cart, ensure_ascii=False)
if mode == "background":
    subprocess.Popen(["sleep", "299.5"], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
if mode == "linkout":
    secret = os.path.join(os.path.dirname(os.getcwd()), "..", "secret-outside.json")
    with open(secret, "w") as f:
        f.write('{"products": [{"id": "SECRET-XYZ", "quantity": 1}], "syncedThrough": 0}')
    os.unlink("cart.json")
    os.symlink(os.path.abspath(secret), "cart.json")
elif mode == "inplace":
    with open("cart.json", "w", encoding="utf-8") as f:
        for i in range(0, len(text), 16):
            f.write(text[i:i + 16])
            f.flush()
else:
    if mode == "acklast":
        early = json.dumps(dict(cart, syncedThrough=done))
        with open(".cart.tmp", "w", encoding="utf-8") as f:
            f.write(early)
        os.rename(".cart.tmp", "cart.json")
        time.sleep(0.02)
    with open(".cart.tmp", "w", encoding="utf-8") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    os.rename(".cart.tmp", "cart.json")
