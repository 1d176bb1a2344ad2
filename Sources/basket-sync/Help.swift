import BasketSyncAgent

/// The `--help` texts: what each command does, its options, and an example.
enum Help {
    static let overview = """
        basket-sync \(basketSyncVersion) — keeps a retailer cart and the Mealz basket aligned

        usage: basket-sync [-C DIR | --dir DIR] COMMAND [OPTIONS]

        The sync directory is DIR, else $BASKET_SYNC_DIR, else the current directory.

        commands:
          init      create a sync directory with a commented default configuration
          watch     the agent: watch cart.json and the inbox until SIGTERM/SIGINT
          sync      one pass for cron: take the cart, the inbox and expired windows, then exit
          push      drop a Mealz event into the inbox (the sandbox's "Mealz")
          status    the state at a glance (--json for scripts)

        basket-sync COMMAND --help tells more. Exit codes follow sysexits: 0 ok, 64 usage,
        65 bad data, 66 missing input, 73 cannot create output, 74 I/O error, 75 busy or
        temporary (try again), 78 configuration.

        example:
          basket-sync -C /tmp/sandbox init && basket-sync -C /tmp/sandbox watch

        """

    static func text(for command: String?) -> String {
        switch command {
        case "init":
            return """
                usage: basket-sync [-C DIR] init

                Creates the sync directory (and its parents), inbox/{tmp,new,cur,bad}/, the database in
                .basket-sync/ and a commented basket-sync.json with every setting at its default.
                Idempotent: what exists is kept.

                example:
                  basket-sync -C /srv/cart-sync init

                """
        case "watch":
            return """
                usage: basket-sync [-C DIR] watch [--no-synchronizer] [--log-format human|json]

                Runs the agent: each new version of cart.json becomes a notifyRetailerBasketChanged in
                notifications.jsonl; each Mealz event in inbox/new/ becomes updateBasket deltas in
                outbox.jsonl, exactly once. Runs until SIGTERM or SIGINT (exit 0); SIGHUP reloads
                basket-sync.json. One agent per directory: a second one exits 75.

                  --no-synchronizer     register no synchronizer: Mealz deltas are ignored (and
                                        counted), as the SDK does without one
                  --log-format FORMAT   human (default) or json, one object per line on stderr

                example:
                  basket-sync -C /srv/cart-sync watch --log-format json

                """
        case "sync":
            return """
                usage: basket-sync [-C DIR] sync [--no-synchronizer] [--json]

                One pass for cron or scripts: catches the JSON Lines files up with the database, takes
                the cart if it changed, every event waiting in inbox/new/, and the expired pending
                windows, then exits. Safe beside a running agent. Exits 65 when the cart is invalid.

                  --no-synchronizer   register no synchronizer (Mealz deltas ignored, counted)
                  --json              print what the pass did as one JSON object

                example:
                  * * * * * basket-sync -C /srv/cart-sync sync

                """
        case "push":
            return """
                usage: basket-sync [-C DIR] push [--id ID] SKU=±N ...
                       basket-sync [-C DIR] push --state [--id ID] SKU=N ...
                       basket-sync [-C DIR] push --transfer TRANSFER_ID [--id ID] SKU=N ...
                       basket-sync [-C DIR] push --redirect [--id ID]

                Drops one Mealz event into inbox/new/ the Maildir way (written in inbox/tmp/, then
                renamed), and prints its id. Signed deltas by default (basketDelta); --state gives the
                WebView's whole basket (basketState); --transfer lands an affiliated basket;
                --redirect asks the host to open its cart. A redelivered --id is processed once.

                example:
                  basket-sync push sku-1=+2 sku-9=-1

                """
        case "status":
            return """
                usage: basket-sync [-C DIR] status [--json]

                Prints the Mealz-related lines (Mealz's view, confirmed, pending, the host's
                quantity), the pending batches and their age, the last notification, the record and
                inbox counts, the counters and the last error.

                example:
                  basket-sync status --json | jq .pending

                """
        default:
            return overview
        }
    }
}
