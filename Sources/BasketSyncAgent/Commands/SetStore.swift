import BasketSync
import BasketSyncWire

extension Commands {
    /// What `set-store` leaves in force.
    public struct StoreSummary: Equatable {
        /// The store now selected.
        public var storeId: String?
        /// The mode now in force.
        public var mode: SyncMode
        /// The Mealz basket now open.
        public var basket: UInt64

        /// One line for people.
        public var human: String {
            // Basket 0: the default of a tree's carts, not one cart's.
            basket == 0 ? "default for the carts that never set their own: store \(storeId ?? "none"), \(mode.rawValue) mode"
                : "store \(storeId ?? "none"), \(mode.rawValue) mode, Mealz basket \(basket)"
        }

        /// One JSON object for scripts.
        public var json: String {
            var writer = JSONWriter()
            writer.object { object in
                object.member("storeId", storeId)
                object.member("mode", mode.rawValue)
                object.member("basket", basket)
            }
            return writer.text
        }
    }

    /// `set-store`: `setSelectedStoreWithExternalId`, and the mode when given; kept in the state.
    public static func setStore(directory: String, externalId: String, mode: SyncMode?, logger: Logger) throws(AgentError) -> StoreSummary {
        if case .treeRoot = Workspace.of(directory) {
            // The tree's default: every cart that never set its own takes it at its next step.
            let tree = try Tree(root: directory)
            try checkIdentifier(externalId, "set-store: the store id", limits: tree.configuration.limits)
            let newMode = try tree.database.withTransaction { () throws(AgentError) in
                let previous = try tree.defaultStore()?.1
                let mode = mode ?? previous ?? .standalone
                try tree.database.rootRows.setNote(.defaultStore, "\(externalId)\t\(mode.rawValue)")
                return mode
            }
            return StoreSummary(storeId: externalId, mode: newMode, basket: 0)
        }
        let engine = try SyncEngine(directory: directory, isSynchronizerRegistered: true, logger: logger)
        // The files first: they hold what the database must hold, and a database that lost it
        // (restored, its WAL deleted) is found here (74) before anything more is written.
        try engine.publishAll()
        try checkIdentifier(externalId, "set-store: the store id", limits: engine.configuration.limits)
        try engine.step({ (machine, now) throws(AgentError) in
            machine.setSelectedStore(externalId: externalId, mode: mode, at: now)
        }, record: { _ throws(AgentError) in
            // A cart of a tree that sets its own store no longer follows the tree's default.
            if engine.store.cart != 0 { try engine.store.setNote(.ownStore, "1") }
        })
        engine.signalCommit()
        let state = try engine.currentState()
        return StoreSummary(storeId: state.storeId, mode: state.mode, basket: state.basket)
    }
}
