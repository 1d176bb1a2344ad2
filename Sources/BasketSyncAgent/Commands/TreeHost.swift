import BasketSync
import BasketSyncWire
import Glibc

extension Commands {
    /// One cart of a tree with records after its host's progress: what `wait` on the root prints,
    /// one JSON line each (`{"cart":ID,"after":N,"through":M}`).
    public struct CartWaiting: Equatable, Sendable {
        /// The cart's id (its directory's name under the root).
        public var cart: String
        /// The host's progress: the records after it are to apply.
        public var after: UInt64
        /// The cart's last outbox seq.
        public var through: UInt64

        /// `{"cart":ID,"after":N,"through":M}`.
        public var json: String {
            var writer = JSONWriter()
            writer.object { $0.member("cart", cart); $0.member("after", after); $0.member("through", through) }
            return writer.text
        }
    }

    /// The carts of the tree at `root` whose outbox holds records after their host's progress,
    /// by id, and the carts with records that cannot be served: their cart claims beyond their
    /// outbox (their `apply` refuses, 74), each with its error. `known` caches each cart's
    /// progress between looks (a cart whose last seq is not past it is not read again); one
    /// read-only connection, opened and closed for this look.
    static func cartsWaiting(root: String, known: inout [Int64: UInt64]) throws(AgentError) -> (waiting: [CartWaiting], refused: [(cart: String, error: AgentError)]) {
        let tree = try Tree(root: root, readOnly: true)
        let (carts, lasts) = try tree.database.withTransaction { () throws(AgentError) in
            (try tree.database.carts(), try tree.database.lastOutboxSeqs())
        }
        var waiting: [CartWaiting] = []
        var refused: [(cart: String, error: AgentError)] = []
        for (id, number) in carts.sorted(by: { $0.key < $1.key }) {
            guard let last = lasts[number], last > known[number] ?? 0 else { continue }
            // A cart that cannot be read now: its directory made again, not adopted yet, is left
            // for the agent; one refused (its folder holds another cart's marker — folders
            // swapped — or records of no cart) is said, never passed over in silence. The others
            // are served.
            let store: Store
            do { store = try tree.cartStore(id, create: false, readOnly: true) } catch {
                if case .refused = error { refused.append((id, error.named)) }
                continue
            }
            let (state, noted) = try store.withTransaction { () throws(AgentError) in (try store.loadState(), try store.given(.outbox)?.seq ?? 0) }
            // A cart claiming beyond its outbox cannot be served (its apply refuses, 74): said, never
            // hidden, and looked at again at the next look. Any other error is the wait's.
            // The cart read once for its claim, the host's progress and whether it can be read.
            let standing = CartReader.standing(in: store.directory, configuration: tree.configuration)
            if let error = CartReader.claimBeyondOutbox(standing.cart?.syncedThrough, state: state, cartPath: "\(store.directory)/\(tree.configuration.cart)", configuration: tree.configuration) {
                refused.append((id, error.named))
                continue
            }
            let progress = try CartReader.hostProgress(state, store: store, directory: store.directory, configuration: tree.configuration, standing: standing)
            known[number] = progress
            // Through the last record a file holds (as `wait` on the cart): one whose line is not
            // appended yet waits for it — the note written after the append wakes the next look.
            let through = Commands.outboxInFile(path: "\(store.directory)/\(Projection.outbox.fileName)", committed: last, noted: noted)
            guard through > progress else { continue }
            // Nor can a cart its apply cannot read (one that does not parse, a FIFO): said, and
            // listed once it is mended — never listed for a host loop to fail on at once, again
            // and again.
            if let error = standing.unreadable {
                refused.append((id, error.named))
                continue
            }
            waiting.append(CartWaiting(cart: id, after: progress, through: through))
        }
        return (waiting, refused)
    }

    /// `wait` on a tree's root: blocks until one cart or more has records after its host's
    /// progress, and returns them — one process serves a fleet. It sleeps on inotify (the tree's
    /// database written: any commit) — and looks at every poll interval where the root is
    /// polled — and writes nothing. Throws `.busy` (75) when `timeout` seconds pass first.
    /// A cart with records that cannot be served (its cart claims beyond its outbox, or cannot
    /// be read) is given to `refused` once, when first seen, and waited for again once it can be.
    public static func waitTree(root: String, timeout: Double?, refused: (String, AgentError) -> Void = { _, _ in }) throws(AgentError) -> [CartWaiting] {
        let configuration = try AgentConfiguration.load(directory: root)
        let databaseDirectory = try Database.place(of: root).state
        let inotify: Inotify
        do {
            inotify = try Inotify(path: root)
            try inotify.watch(root, [.deleteSelf, .moveSelf, .onlyDirectory])
            try inotify.watch(databaseDirectory, [.modify, .closeWrite, .movedTo, .create, .deleteSelf, .moveSelf, .onlyDirectory])
        } catch {
            throw .system(error)
        }
        let polling = (try? WatchChoice.decide(directory: root, cart: configuration.cart, settings: configuration.watch, override: nil))
            .flatMap { $0.polls ? $0.intervalMs : nil }
        var known: [Int64: UInt64] = [:]
        var said = Set<String>()
        // Under a busy agent (a commit a millisecond) a look every 20 ms at most.
        let loop = WaitLoop(inotify: inotify, path: root, pollMs: polling, timeout: timeout, minimumGap: 0.02)
        do throws(AgentError) {
            return try loop.run(timedOut: "\(root): no cart has records after its host's progress within \(AgentConfiguration.number(timeout ?? 0)) s; run wait again to go on waiting",
                                worthALook: { event in
                // A commit writes the database's WAL (the agent's, a one-shot command's); its own
                // reads (the shared-memory index, a connection closing) are not worth a look.
                event.name == Layout.commitSignal || (event.name == Layout.database + "-wal" && event.mask.contains(.modify))
                    // The database replaced (a backup restored).
                    || (event.name == Layout.database && !event.mask.isDisjoint(with: [.movedTo, .create]))
            }) { () throws(AgentError) -> [CartWaiting]? in
                let (waiting, refusedNow) = try cartsWaiting(root: root, known: &known)
                for (cart, error) in refusedNow where !said.contains(cart) { refused(cart, error) }
                said = Set(refusedNow.map(\.cart))
                return waiting.isEmpty ? nil : waiting
            }
        } catch {
            // The carts that could not be served are named with the time out, not left to be missed.
            guard case .busy = error, !said.isEmpty else { throw error }
            throw .busy("\(root): no cart has records to apply within \(AgentConfiguration.number(timeout ?? 0)) s but \(said.count) whose records are refused (said above: \(said.sorted().prefix(5).joined(separator: ", "))\(said.count > 5 ? ", …" : "")); run wait again to go on waiting")
        }
    }

    /// What `apply` on a tree's root did: each cart it applied, or why it could not.
    public struct TreeApplySummary {
        /// The carts applied, by id, with what `apply` did in each.
        public var applied: [(cart: String, summary: ApplySummary)] = []
        /// The carts that failed, with the error (the others were served all the same).
        public var failed: [(cart: String, error: AgentError)] = []

        /// One line per cart applied; the failures are said on standard error.
        public var human: String {
            applied.isEmpty ? (failed.isEmpty ? "nothing to apply: no cart has records after its host's progress"
                                               : "no cart applied: \(failed.count) cart(s) with records after their host's progress failed (each said on standard error)")
                : applied.map { "\($0.cart): \($0.summary.human.replacingOccurrences(of: "\n", with: "\n\($0.cart): "))" }.joined(separator: "\n")
        }

        /// One JSON object per line: `{"cart":ID,…apply's --json…}`.
        public var json: String {
            applied.map { cart, summary in
                var writer = JSONWriter()
                writer.string(cart)
                return "{\"cart\":\(writer.text),\(summary.json.dropFirst())"
            }.joined(separator: "\n")
        }
    }

    /// `apply` on a tree's root: the reference host, cart by cart — `apply` in each cart with
    /// records after its host's progress (as `wait` on the root lists them). A cart that fails
    /// is reported and the others are served.
    public static func applyTree(root: String, lockTimeout: Double?, logger: Logger) throws(AgentError) -> TreeApplySummary {
        var known: [Int64: UInt64] = [:]
        var summary = TreeApplySummary()
        let (waiting, refused) = try cartsWaiting(root: root, known: &known)
        summary.failed = refused
        for cart in waiting {
            do throws(AgentError) {
                summary.applied.append((cart.cart, try apply(directory: "\(root)/\(cart.cart)", lockTimeout: lockTimeout, logger: logger)))
            } catch {
                // Named now: the cart's folder, pinned while it was served, is closed, and the
                // descriptor's number may be another cart's folder by the time this is printed.
                summary.failed.append((cart.cart, error.named))
            }
        }
        return summary
    }
}
