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
        public var human: String { "store \(storeId ?? "none"), \(mode.rawValue) mode, Mealz basket \(basket)" }

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
        let engine = try SyncEngine(directory: directory, isSynchronizerRegistered: true, logger: logger)
        // The files first: they hold what the database must hold, and a database that lost it
        // (restored, its WAL deleted) is found here (74) before anything more is written.
        try engine.publishAll()
        try checkIdentifier(externalId, "set-store: the store id", limits: engine.configuration.limits)
        try engine.step { (machine, now) throws(AgentError) in
            machine.setSelectedStore(externalId: externalId, mode: mode, at: now)
        }
        engine.signalCommit()
        let state = try engine.currentState()
        return StoreSummary(storeId: state.storeId, mode: state.mode, basket: state.basket)
    }
}
