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

    /// `sync`: one pass for cron (the agent's ``SyncEngine/pass(_:)``), then wakes a running agent.
    public static func syncOnce(directory: String, isSynchronizerRegistered: Bool, logger: Logger) throws(AgentError) -> SyncSummary {
        let engine = try SyncEngine(directory: directory, isSynchronizerRegistered: isSynchronizerRegistered, logger: logger)
        let summary = try engine.pass(.everything)
        engine.signalCommit()
        return SyncSummary(cart: summary.cart ?? .missing, inbox: summary.inbox)
    }
}
