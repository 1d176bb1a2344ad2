import BasketSyncAgent

/// The `--help` texts: what each command does, its options, and an example.
enum Help {
    static let overview = """
        basket-sync \(basketSyncVersion) — keeps a retailer cart and the Mealz basket aligned

        usage: basket-sync [-C DIR | --dir DIR] COMMAND [OPTIONS]
               basket-sync --version | --help

        The sync directory is DIR, else $BASKET_SYNC_DIR, else the current directory.

        commands:
          init      create a sync directory with a commented default configuration
          watch     the agent: watch cart.json and the inbox until SIGTERM/SIGINT
          sync      one pass for cron: take the cart, the inbox and expired windows, then exit
          push      drop a Mealz event into the inbox (the sandbox's "Mealz")
          status    the state at a glance (--json for scripts)
          metrics   the metrics, in Prometheus's text format
          apply     the reference host: apply the outbox to cart.json, atomically
          payment-started   record that a payment started (best-effort)
          handle-payment    record a payment once per order, then run a completion
          set-store         select the store and the mode (setSelectedStoreWithExternalId)
          validate  check a cart, inbox event or configuration file
          wait      block until the outbox has records for the host, print them
          lock      run a host's own cart edit holding the cart lock apply takes
          check-host        check a host's own apply command against scripted scenarios
          completion        print a bash completion script (basket-sync completion bash)
          man               print the manual page, basket-sync(1), in roff

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
                usage: basket-sync [-C DIR] init [--adopt] [--shared GROUP] [--rebind]
                       basket-sync -C ROOT init --tree [--adopt] [--shared GROUP] [--rebind]

                Creates the sync directory (and its parents), inbox/{tmp,new,cur,bad}/, the database in
                .basket-sync/ and a commented basket-sync.json with every setting at its default.
                Idempotent: what exists is kept. A directory that holds records (outbox.jsonl,
                notifications.jsonl, payments.jsonl) but no database lost its database: init refuses
                (73) unless --adopt, which takes the records of the files into a new database and
                continues every seq after the files' last one; the events taken before (the records'
                sources, inbox/cur/) stay taken.

                --tree makes ROOT the root of a tree of carts: its basket-sync.json says "layout":
                "tree" and one database serves every cart, each a subdirectory ROOT/ID (an id is 1 to
                128 of A-Z a-z 0-9 . _ -, not starting with a dot, not basket-sync.json). init -C
                ROOT/ID makes cart ID (--adopt: a directory holding records goes on after them). A
                tree whose database is gone while its carts hold records is refused (73) unless
                --tree --adopt, which adopts each such cart. Nothing is made inside a sync directory
                or a tree but a tree's carts.

                --shared GROUP sets the directory up for the host's and the Mealz side's accounts,
                members of GROUP, beside the agent's (run it as the agent's account): the directory
                and inbox/tmp/, inbox/new/ setgid, sticky and writable by the group, the outputs and
                the configuration readable by it, .basket-sync/ the agent's alone. basket-sync uses
                a configuration or a database only when owned by the account it runs as (or root)
                and writable by nobody else, in a directory others may write only with the sticky
                bit; anything else is refused (78, 74) with the chown or chmod that fixes it.

                --rebind: with "database" elsewhere, the database is bound to the .basket-sync/
                folder it was made with; a copy of the directory (cp -a) is refused (74). Given
                on the directory itself, moved or restored (its .basket-sync/ a new folder
                holding the database's id), it binds the database to it — never to a copy, whose
                original would then be refused.

                example:
                  basket-sync -C /srv/cart-sync init

                """
        case "watch":
            return """
                usage: basket-sync [-C DIR] watch [--no-synchronizer] [--log-format human|json] [--quiet] [--poll[=MS]]

                Runs the agent: each new version of cart.json becomes a notifyRetailerBasketChanged in
                notifications.jsonl; each Mealz event in inbox/new/ becomes updateBasket deltas in
                outbox.jsonl, exactly once. Runs until SIGTERM or SIGINT (exit 0); SIGHUP reloads
                basket-sync.json. One agent per directory: a second one exits 75.

                  --no-synchronizer     register no synchronizer: Mealz deltas are ignored (and
                                        counted), as the SDK does without one
                  --log-format FORMAT   human (default) or json, one object per line on stderr
                  --quiet               warnings and errors only (and the "watching" line); by
                                        default each record made is a line: "outbox #17
                                        updateBasket sku-1 +2 from evt-42", "notify #5 sku-1=2 st
                                        17", "payment #2 handlePayment recorded order-123 42.50";
                                        in json the record rides along as "record"
                  --poll[=MS]           look for changes every MS milliseconds (default: the
                                        configuration's "watch.pollIntervalMs", 1000) instead of
                                        inotify; "watch": {"mode": "auto"} polls by itself on
                                        NFS, SMB, FUSE, 9p, Ceph, where inotify cannot see other
                                        machines' writes

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
                       basket-sync [-C DIR] push --state [--basket N] [--id ID] SKU=N ...
                       basket-sync [-C DIR] push --transfer TRANSFER_ID [--id ID] SKU=N ...
                       basket-sync [-C DIR] push --redirect [--id ID]

                Drops one Mealz event into inbox/new/ the Maildir way (written in inbox/tmp/, then
                renamed), and prints its id. Signed deltas by default (basketDelta); --state gives the
                WebView's whole basket (basketState); --transfer lands an affiliated basket;
                --redirect asks the host to open its cart. A redelivered --id is processed once.
                A state carries the Mealz basket it was based on: the current one, or --basket N
                (the "basket" of the notification the WebView saw); a state for a basket a payment
                or a store change has closed is stale, ignored and counted, never diffed. An
                account that may not read the database takes the last notification's basket (73
                when none tells it: give --basket N). A broken or refused basket-sync.json does
                not stop deliveries into a sync directory or a tree's cart that is made (the
                default limits check them); a tree's cart is made only under one that is not (78).

                example:
                  basket-sync push sku-1=+2 sku-9=-1

                """
        case "status":
            return """
                usage: basket-sync [-C DIR] status [--json]

                Prints the Mealz-related lines (Mealz's share: the units from Mealz the host applied;
                the WebView's basis: the last notification plus the pending deltas; the pending
                deltas; the host's quantity), the pending batches and their age, the last
                notification, the record and inbox counts, the counters, the anomalies (late echoes
                and acknowledgements, acknowledgements beyond the outbox or going back) and the last
                error. A broken basket-sync.json is said second (configurationError in --json): the
                report then shows the defaults, and status exits 78 as every other command would.

                example:
                  basket-sync status --json | jq .pending

                """
        case "apply":
            return """
                usage: basket-sync [-C DIR] apply [--json] [--timeout SECONDS]

                The reference host: applies the outbox records after the host's progress (the
                highest seq acknowledged; the cart's syncedThrough counts only for records that
                existed when that cart was written, and not at all when it claims one that did
                not), in seq order, to the cart (a line is clamped at 0 and removed when it reaches 0, held at
                limits.maxQuantity rather than going past it, a new SKU gets
                a new line; other lines and fields are kept as they are), then writes the cart
                atomically (temp file, fsync, rename, fsync of the directory) with the new
                syncedThrough. A bare-array cart becomes an object, to hold syncedThrough. Safe beside
                a running agent, which takes the new cart on its rename. A cart claiming beyond the
                outbox's last seq (a backup of the database restored, another directory's cart) is
                refused (74), nothing written: what it holds already would be applied twice.
                It holds the host's cart lock (cart.json.lock beside the cart, flock) from its read
                to its rename, waiting up to SECONDS for it (default 30; then exit 75, naming the
                process that holds it), and renames only if the cart on disk is still the one it
                read: a cart written meanwhile is read again and the records applied to it (after
                5 tries, exit 75 and nothing written). A host that edits the cart while apply may
                run wraps its edit in basket-sync lock. SECONDS also bounds its wait for the
                directory's files held by another basket-sync process (then exit 75, naming them).
                On a tree's root it applies every cart that has records after its host's progress
                (the carts wait on the root lists), one after the other: one line per cart (--json:
                one object per line, with "cart"); a cart that fails, or whose records wait said it
                cannot list, is said on stderr and the others are served (the exit status is the
                first failure's).

                example:
                  basket-sync apply --json

                """
        case "payment-started":
            return """
                usage: basket-sync [-C DIR] payment-started --total AMOUNT [--order-id ID] [--products FILE|-] [--json]

                Records in payments.jsonl that a payment started (paymentStarted). Best-effort: without
                retailer mode, a store or a Mealz product, or with products that cannot be read, it
                records a "skipped" line with the reason and still exits 0. AMOUNT is exact, like
                42.50. The products are the cart (default), a file in the cart format, or - for
                standard input. An order that handle-payment recorded already is paid: nothing is
                recorded, and the answer says it is a duplicate (exit 0). Each other call is a
                payment attempt and records a line, the same order's again included (a payment
                tried again after a failure starts again): a host that retries after a timeout
                may record one start twice.
                --json prints {"duplicate":…,"seq":…,"payment":{the record},"completion":null}.

                example:
                  basket-sync payment-started --total 42.50

                """
        case "handle-payment":
            return """
                usage: basket-sync [-C DIR] handle-payment --total AMOUNT --order-id ID [--products FILE|-] [--json] [--then CMD ARG…]

                Records the payment of an order (handlePayment) once. Recorded as "skipped" when no
                Mealz product was bought. Closes the Mealz basket. Needs retailer mode and a store
                (set-store ID --mode retailer): without them it fails with exit 78 and runs no
                completion.
                The cart is taken first (what it shows applied counts as Mealz's), with --products
                too.
                --then runs CMD with its arguments (no shell) once the record is durable; when the
                completion fails, basket-sync exits with its status. The completion runs under a
                supervisor (basket-sync itself) that records its outcome when it exits: killed,
                handle-payment leaves it running, and a completion that exited 0 is recorded all
                the same; the supervisor killed alone, handle-payment waits for the completion
                and records its end. With --json, the completion's standard output goes to
                standard error.
                Retries are safe. The same order id again records nothing and exits 0 as a
                duplicate; its completion runs again only if it never exited 0 (it failed or was
                killed), never after it succeeded (it may clear a cart the shopper filled since). A
                retry whose total, or whose --products list, differs from the recorded payment is
                refused with exit 65 naming both. Concurrent retries of one order wait for each
                other, and for a completion still running after its basket-sync was killed (so a
                completion must not run handle-payment for its own order: it would wait for ever).
                While the completion runs, handle-payment waits for it whatever signal comes.
                The completion gets the order's lock as descriptor 3 (and no other file of
                basket-sync's): a process it leaves running should close it (exec 3>&-), or the
                order's retries wait for that process.
                --json prints {"duplicate":…,"seq":…,"payment":{the record},"completion":…}, where
                completion is null (no --then), {"ran":true,"status":N} or
                {"ran":false,"finishedAt":"…"}.

                example:
                  basket-sync handle-payment --total 42.50 --order-id order-123 --then ./notify-shop order-123

                """
        case "set-store":
            return """
                usage: basket-sync [-C DIR] set-store EXTERNAL_ID [--mode retailer|standalone] [--json]

                Selects the store (setSelectedStoreWithExternalId) and, with --mode, the mode; both are
                kept in the database and survive restarts. A different store starts a new Mealz
                basket that carries over what the cart holds: nothing is pushed again, no quantity
                doubled. Payments are recorded in retailer mode with a store only.

                example:
                  basket-sync set-store store-42 --mode retailer

                """
        case "validate":
            return """
                usage: basket-sync [-C DIR] validate [--cart|--event|--config] FILE…

                Checks files and prints every problem as path:line:column: reason; exits 65 when any
                file has one. A file that cannot be read (66 when missing) is said and the others
                checked; its code is then the exit status. The kind comes from the name
                (basket-sync.json: configuration; under inbox/: an event; else a cart) unless given.
                Carts are checked with the sync directory's key names and limits. A file of the sync
                directory (by the path as written, through any link; a .. as the kernel takes it) is
                read as basket-sync reads it there: no symbolic link followed on the way, a cart's only
                with "followSymlinks"; valid means the agent takes it (the directory's configuration:
                its owner and mode too, refused with the commands' 78). A file that lies in another sync
                directory or tree is judged by that one, wherever it is named from; a file in none is
                yours: a link on its path is followed only to what its owner owns. A cart or
                event is judged under its directory's
                configuration: one the commands refuse is said (78). FILE - reads standard input.

                example:
                  basket-sync validate cart.json basket-sync.json

                """
        case "check-host":
            return """
                usage: basket-sync [-C DIR] check-host [--scenarios LIST] [--seed N] [--limit SECONDS] [--json] -- CMD ARG…

                The conformance kit: runs your host's one-shot apply command (CMD, no shell) against
                scripted scenarios, each in a scratch sync directory of its own with the settings of
                DIR (key names, cart path; its database in its own .basket-sync/, whatever
                "database" says). CMD runs there, with that directory in $BASKET_SYNC_DIR;
                it must apply what the outbox holds after the cart's syncedThrough, then exit.
                Scenarios: new-and-existing (deltas on new and existing lines), past-zero (removals
                past 0), past-zero-then-add (a removal past 0, then an addition: clamped record by
                record), many (40 records), rotated (outbox.jsonl rotated every 300 bytes, whatever
                the settings: records taken by seq, none hidden in a rotated file), redirect, replay
                (run again: nothing applied twice), arriving (records appended while it runs),
                crash (SIGKILL at random instants, then a rerun), unicode-ids (ids that Unicode
                normalization would merge or change: compared byte for byte, they stay apart),
                same-id-lines (an id on two lines: a delta moves their sum, never each line; an id
                with spaces around it is a SKU of its own).
                Every cart the host writes during a run is judged as it appears (inotify), not only
                the last. For each rule it prints ok, or what the host did wrong with the record
                and the cart it left: it applies a record twice or out of order, skips one, does
                not clamp at 0 record by record, ignores removals, loses other lines or fields,
                normalizes ids, writes the cart in place, never
                reports syncedThrough (or leaves it where it was while its lines move, or moves
                it back), reports it too far, or writes it in another cart than
                the lines it covers (before them, or after: killed between, records apply twice).
                Exits 0 when every rule holds, else 65 (the scratch directories are then kept,
                with the host's output in host.log). --json prints the
                report as one JSON object (passed, seed, scenarios, rules with ok true, false or
                null when not judged, findings) for CI. A run is stopped after 30 s (--limit), and
                a host that never exits ends the check. What a run leaves running in its process
                group is stopped with it. A host that rejects records (processes them without
                applying them) is reported: check-host expects every record applied. --seed
                replays the random parts of a report. --scenarios runs the ones it names, each
                once (a list naming none is a usage error, 64). A relative CMD is relative to DIR
                (as with git -C).

                example:
                  basket-sync -C /srv/shop check-host -- ./host.py --once .

                """
        case "wait":
            return """
                usage: basket-sync [-C DIR] wait [--after SEQ] [--timeout SECONDS]

                Blocks until outbox.jsonl holds a record after SEQ, prints those records as JSON
                Lines (as the outbox holds them) and exits 0; exits 75 when SECONDS pass first
                (--timeout 0: look once). SEQ defaults to the host's progress, as apply takes it:
                what the database knows the host applied, or the cart's syncedThrough (its
                configured key) when it claims only records that existed when the cart was written;
                a cart claiming beyond the outbox's last seq is refused (74), as apply refuses it.
                A record is printed once its line is in outbox.jsonl. Taking SEQ from the cart, it
                prints nothing while the cart cannot be read (apply would fail on it): said once on
                stderr, the records printed once the cart is mended. It sleeps on inotify (and
                looks at every interval where the directory is polled: "watch" in
                basket-sync.json) and writes nothing: it works beside the agent,
                beside sync run from cron, and on a read-only file system. A shell host loops on it
                instead of polling the outbox; it ends with the process that started it (a host
                killed while it waits leaves none behind; one killed the instant it started wait
                cannot be told from the process that adopts wait: give --timeout). A host that does not write syncedThrough keeps its
                own progress and gives it with --after (else it is shown the same records until
                basket-sync sees them echoed in its cart).

                On a tree's root it waits for every cart at once: it blocks until one cart or more
                has records after its host's progress and prints one line per such cart,
                {"cart":"ID","after":N,"through":M} (no --after: each cart has its own progress).
                One process serves a fleet; apply on the root then applies them cart by cart. A
                cart whose records cannot be applied (its cart claims beyond its outbox, or cannot
                be read: its apply refuses) is not listed but said on stderr when first seen, and
                named if the wait times out.

                example:
                  while basket-sync wait >/dev/null; do basket-sync apply || exit; done

                """
        case "metrics":
            return """
                usage: basket-sync [-C DIR] metrics

                Prints the metrics of the sync directory (or of a tree: summed over its carts) in
                Prometheus's text format, as the agent writes them to "metrics" in basket-sync.json
                for node_exporter's textfile collector: counters (records per file, updateBasket
                batches, notifications, settled, rolled back, late echoes, ignored, payments by
                status, duplicate payments, acknowledgement anomalies) and gauges (bad events,
                current errors, pending batches, waiting events and the oldest one's age, the
                agent up and its state, its last whole pass; on a tree, carts by state). Every
                sample carries directory="…". It only reads. A basket-sync.json every command
                refuses is said on stderr with its place after what it can print (counted
                among the errors), and it exits 78, as status does.

                example:
                  basket-sync -C /srv/shop metrics | grep basket_sync_agent_up

                """
        case "lock":
            return """
                usage: basket-sync [-C DIR] lock [--timeout SECONDS] -- CMD ARG…

                Runs CMD with its arguments (no shell) holding the host's cart lock: an exclusive
                flock on cart.json.lock beside the cart (the name follows "cart" in
                basket-sync.json), the lock apply takes around its read-modify-rename. A host that
                edits the cart while apply may run (a shopper's edit racing apply) wraps its edit
                in it, and neither loses the other's write. Waits for the lock as long as it takes,
                or up to SECONDS (then exit 75, naming the process that holds it). Exits with CMD's
                status. CMD gets the lock as descriptors 3 (the lock file) and 4 (the sync
                directory, locked too so that a lock file removed while held still excludes): a
                process it leaves running holds the lock until it ends or closes them
                (exec 3>&- 4>&-). The agent never takes the lock.

                example:
                  basket-sync lock --timeout 10 -- ./edit-cart add sku-1 2

                """
        case "completion":
            return """
                usage: basket-sync completion bash

                Prints a bash completion script: the commands, and each command's options. Load it
                in a shell with source <(basket-sync completion bash), or install it as
                /usr/share/bash-completion/completions/basket-sync.

                example:
                  basket-sync completion bash > /etc/bash_completion.d/basket-sync

                """
        case "man":
            return """
                usage: basket-sync man

                Prints the manual page basket-sync(1) in roff, made from these help texts: every
                command, the files, the exit codes, the environment and the signals.

                example:
                  basket-sync man | man -l -

                """
        default:
            return overview
        }
    }
}
