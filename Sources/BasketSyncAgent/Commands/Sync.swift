import BasketSync
import BasketSyncWire

extension Commands {
    /// What one `sync` pass did.
    public struct SyncSummary: Equatable {
        /// What reading the cart gave.
        public var cart: SyncEngine.CartOutcome
        /// What taking the inbox did.
        public var inbox: SyncEngine.InboxSummary

        private var cartWord: String {
            switch cart {
            case .missing: return "missing"
            case .unchanged: return "unchanged"
            case .rejected: return "rejected"
            case .taken: return "taken"
            case .unsettled: return "being written"
            }
        }

        /// One line for people.
        public var human: String {
            "cart \(cartWord); inbox: \(inbox.taken) taken, \(inbox.duplicates) duplicates, \(inbox.bad) bad"
        }

        /// One JSON object for scripts.
        public var json: String {
            var writer = JSONWriter()
            writer.object { object in
                object.member("cart", cartWord)
                object.member("inbox") { writer in
                    writer.object { counts in
                        counts.member("taken", inbox.taken)
                        counts.member("duplicates", inbox.duplicates)
                        counts.member("bad", inbox.bad)
                    }
                }
            }
            return writer.text
        }
    }
}

extension Commands {
    /// What `sync` did, cart by cart: a sync directory is a tree of one cart, the directory itself.
    public struct SyncReport {
        /// Whether the directory is a tree's root (its report sums its carts up); a sync directory
        /// (or one cart of a tree) reports its one pass.
        public var isTree = false
        /// Each cart's pass, by cart id: what it did, or the error that stopped it.
        public var carts: [(id: String, outcome: Result<SyncSummary, AgentError>)] = []
        /// Carts whose directory had been gone from the tree longer than a cart may be away: they ended.
        public var ended: [String] = []

        /// A sync directory's one pass.
        private var only: SyncSummary? {
            guard !isTree, carts.count == 1, case let .success(summary) = carts[0].outcome else { return nil }
            return summary
        }

        private func count(_ word: String) -> Int {
            carts.filter { if case let .success(summary) = $0.outcome { summary.human.hasPrefix("cart \(word);") } else { false } }.count
        }

        private var failed: [(id: String, error: AgentError)] {
            carts.compactMap { if case let .failure(error) = $0.outcome { ($0.id, error) } else { nil } }
        }

        private func inbox(_ part: (SyncEngine.InboxSummary) -> Int) -> Int {
            carts.reduce(0) { if case let .success(summary) = $1.outcome { $0 + part(summary.inbox) } else { $0 } }
        }

        /// The exit status: 0, 65 when a cart was rejected, or the first other failure's code.
        public var status: Int32 {
            if let only { if case .rejected = only.cart { return 65 } else { return 0 } }
            if let error = failed.first(where: { if case .badData = $0.error { false } else { true } })?.error { return error.exitCode }
            return count("rejected") + failed.count > 0 ? 65 : 0
        }

        /// One line for people (each failure was logged on stderr, naming its cart).
        public var human: String {
            if let only { return only.human }
            return             "\(carts.count) carts: \(count("taken")) taken, \(count("unchanged")) unchanged, \(count("rejected")) rejected, \(count("missing")) without a cart, \(failed.count) failed"
                + "; inbox: \(inbox(\.taken)) taken, \(inbox(\.duplicates)) duplicates, \(inbox(\.bad)) bad"
                + (ended.isEmpty ? "" : "; ended (directory gone): \(ended.joined(separator: " "))")
        }

        /// One JSON object for scripts: each cart's own summary under `"carts"`.
        public var json: String {
            if let only { return only.json }
            var writer = JSONWriter()
            writer.object { object in
                object.member("carts") { writer in
                    writer.array(carts) { writer, cart in
                        writer.object { line in
                            line.member("cart", cart.id)
                            switch cart.outcome {
                            case let .success(summary): line.member("pass") { $0.raw(text: summary.json) }
                            case let .failure(error): line.member("error", error.description)
                            }
                        }
                    }
                }
                object.member("ended") { writer in writer.array(ended) { $0.string($1) } }
            }
            return writer.text
        }
    }

    /// `sync`: one pass for cron over every cart (the agent's ``SyncEngine/pass(_:)``), each
    /// followed by a wake-up of a running agent. A sync directory (or `-C ROOT/ID`) is a tree of
    /// one cart, whose failure is the command's. On a tree's root, the carts whose directory is
    /// gone end first, the new ones are taken on, and a cart that fails is reported while the
    /// others go on.
    public static func sync(directory: String, isSynchronizerRegistered: Bool, logger: Logger) throws(AgentError) -> SyncReport {
        /// One cart's pass, and the wake-up of an agent. Its lines are flushed at once, unless
        /// the caller flushes them with others' (a tree's carts: one `syncfs` for many).
        func pass(_ engine: SyncEngine, flushingNow: Bool = true) throws(AgentError) -> SyncSummary {
            let pass = try engine.pass(.everything)
            if flushingNow { try engine.flush() }
            engine.signalCommit()
            return SyncSummary(cart: pass.cart ?? .missing, inbox: pass.inbox)
        }
        // A failed pass is kept for status, as the agent's are, whichever directory.
        guard case .treeRoot = Workspace.of(directory) else {
            let engine = try SyncEngine(directory: directory, isSynchronizerRegistered: isSynchronizerRegistered, logger: logger)
            do throws(AgentError) { return SyncReport(carts: [("", .success(try pass(engine)))]) } catch {
                engine.keepForStatus(error)
                throw error
            }
        }
        let root = directory
        let tree = try Tree(root: root)
        var summary = SyncReport(isTree: true)
        summary.ended = try tree.removeGoneCarts().ended
        let ids = try tree.cartDirectories()
        // Many new carts (a first pass): adopted together, not one commit and fsync each.
        tree.adoptNew(ids)
        var together = FlushTogether()
        var held = 0  // carts whose lines (and folder) wait for the flush
        // Descriptors: a group's carts hold their folder, files and inbox folders (9 each),
        // the carts waiting for the flush their folder (1 each).
        let spare = Posix.raiseDescriptorLimit() - 32
        let groupBound = max(1, min(256, spare / 20))
        let heldBound = max(2, min(1_024, spare / 2))
        /// A cart's failure: said, and kept on the cart's rows while the directory is still that
        /// cart's (not given back).
        func failed(_ id: String, _ error: AgentError) {
            logger.tagged(cart: id).log(.error, error.description)
            if let known = try? tree.database.withTransaction({ () throws(AgentError) in try tree.database.cart(id) }), tree.markerMatches(id, number: known.number) {
                let store = Store(database: tree.database, cart: known.number, directory: "\(root)/\(id)", signalPath: "")
                _ = try? store.withTransaction { () throws(AgentError) in try store.report(level: Logger.Level.error.rawValue, message: error.description, at: Date()) }
            }
        }
        /// The carts' lines so far, flushed together.
        func flush() {
            held = 0
            together.openDevices()
            for (id, error) in together.finish(FlushTogether.syncAll(together.devices.map { ($0.fd, $0.path) }), logger: logger) {
                failed(id, .system(error))
                if let index = summary.carts.firstIndex(where: { $0.id == id }) { summary.carts[index].outcome = .failure(AgentError.system(error).named) }
            }
        }
        // The carts' passes in groups that share one transaction (one commit, one fsync), as
        // many as hold at most `maxFileBytes` of events and carts together, 256 at most (fewer
        // when descriptors are few).
        var group: [(id: String, engine: SyncEngine, pass: SyncEngine.GroupedPass)] = []
        var groupBytes: Int64 = 0
        var outcomes: [String: Result<SyncSummary, AgentError>] = [:]
        var engines: [String: SyncEngine] = [:]
        func runGroup() {
            let passes = group
            group = []
            groupBytes = 0
            var committed: [(id: String, engine: SyncEngine, pass: SyncEngine.GroupedPass)] = []
            var alone: [(id: String, engine: SyncEngine)] = []
            do throws(AgentError) {
                try tree.database.withTransaction { () throws(AgentError) in
                    (committed, alone) = ([], [])
                    for (id, engine, pass) in passes {
                        var pass = pass
                        do throws(AgentError) {
                            try engine.store.withSavepoint { () throws(AgentError) in try engine.groupedPassInTransaction(&pass) }
                            committed.append((id, engine, pass))
                        } catch {
                            alone.append((id, engine))  // undone; its own pass says what is wrong
                        }
                    }
                }
            } catch {
                // The commit itself failed: each cart's pass alone.
                (committed, alone) = ([], passes.map { ($0.id, $0.engine) })
            }
            for (id, engine, pass) in committed {
                do throws(AgentError) {
                    let done = try engine.finishGroupedPass(pass)
                    engine.signalCommitLeavingTheTree()
                    outcomes[id] = .success(SyncSummary(cart: done.cart ?? .missing, inbox: done.inbox))
                } catch {
                    outcomes[id] = .failure(error.named)
                }
            }
            if !committed.isEmpty { tree.database.signalCommit() }
            for (id, engine) in alone {
                do throws(AgentError) { outcomes[id] = .success(try pass(engine, flushingNow: false)) } catch { outcomes[id] = .failure(error.named) }
            }
        }
        /// The outcomes so far, in the carts' order, their lines handed to the flush.
        func report(_ done: ArraySlice<String>) {
            for id in done {
                guard let outcome = outcomes.removeValue(forKey: id) else { continue }
                if let engine = engines.removeValue(forKey: id) {
                    together.take(engine, cart: id)
                    held += 1
                }
                switch outcome {
                case let .success(pass): summary.carts.append((id, .success(pass)))
                case let .failure(error):
                    summary.carts.append((id, .failure(error)))
                    failed(id, error)
                }
            }
        }
        var reported = ids.startIndex
        for (index, id) in ids.enumerated() {
            do throws(AgentError) {
                let engine = SyncEngine(store: try tree.cartStore(id, create: false), configuration: tree.configuration,
                                        isSynchronizerRegistered: isSynchronizerRegistered, logger: logger.tagged(cart: id))
                engines[id] = engine
                let pass = try engine.prepareGroupedPass()
                let bytes = pass.bytes + (Posix.info(engine.cartPath, follow: true)?.size ?? 0)
                if !group.isEmpty, groupBytes + bytes > Int64(tree.configuration.limits.maxFileBytes) { runGroup() }
                group.append((id, engine, pass))
                groupBytes += bytes
            } catch {
                outcomes[id] = .failure(error.named)
            }
            if group.count >= groupBound || index == ids.count - 1 {
                if !group.isEmpty { runGroup() }
                report(ids[reported...index])
                reported = index + 1
                // A bound on what waits (and on what a power cut may make the next start write
                // again), and on the carts' folders held open until their lines are flushed.
                if together.entries.count >= 4_096 || held >= heldBound { flush() }
            }
        }
        flush()
        return summary
    }
}
