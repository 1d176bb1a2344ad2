import BasketSync

/// Writes the library state as the JSON that `JSONDecoder` reads back into an equal `SyncState`
/// (the synthesized `Codable` layout: dates as seconds since 2001, optionals omitted when nil).
///
/// The agent saves the state after every input; Foundation's `JSONEncoder` took a third of each
/// step's instructions, this writer a small part of that. `EngineTests` checks the round trip.
enum StateEncoding {
    static func encode(_ state: SyncState) -> [UInt8] {
        var writer = JSONWriter()
        writer.raw("{\"syncId\":")
        writer.string(state.syncId)
        writer.raw(",\"lastOutboxSeq\":")
        writer.integer(state.lastOutboxSeq)
        writer.raw(",\"lastNotificationSeq\":")
        writer.integer(state.lastNotificationSeq)
        writer.raw(",\"lastPaymentSeq\":")
        writer.integer(state.lastPaymentSeq)
        writer.raw(",\"basket\":")
        writer.integer(state.basket)
        writer.raw(",\"confirmed\":")
        quantities(state.confirmed, &writer)
        writer.raw(",\"pending\":")
        batches(state.pending, &writer)
        writer.raw(",\"rolledBack\":")
        batches(state.rolledBack, &writer)
        if let hostCart = state.hostCart {
            writer.raw(",\"hostCart\":")
            quantities(hostCart, &writer)
        }
        if let synced = state.hostSyncedThrough {
            writer.raw(",\"hostSyncedThrough\":")
            writer.integer(synced)
        }
        if let notified = state.lastNotified {
            writer.raw(",\"lastNotified\":")
            quantities(notified, &writer)
        }
        if let synced = state.lastNotifiedSyncedThrough {
            writer.raw(",\"lastNotifiedSyncedThrough\":")
            writer.integer(synced)
        }
        if let storeId = state.storeId {
            writer.raw(",\"storeId\":")
            writer.string(storeId)
        }
        writer.raw(",\"mode\":")
        writer.string(state.mode.rawValue)
        writer.raw(",\"recordedOrders\":{")
        for (index, (order, seq)) in state.recordedOrders.enumerated() {
            if index > 0 { writer.raw(",") }
            writer.string(order)
            writer.raw(":")
            writer.integer(seq)
        }
        writer.raw("},\"landedTransfers\":[")
        for (index, transfer) in state.landedTransfers.enumerated() {
            if index > 0 { writer.raw(",") }
            writer.string(transfer)
        }
        let c = state.counters
        writer.raw("],\"counters\":{")
        let counters: [(String, UInt64)] = [
            ("updateBaskets", c.updateBaskets), ("redirects", c.redirects), ("notifications", c.notifications),
            ("settled", c.settled), ("rolledBack", c.rolledBack), ("lateEchoes", c.lateEchoes), ("ignored", c.ignored),
            ("paymentsRecorded", c.paymentsRecorded), ("paymentsSkipped", c.paymentsSkipped),
            ("duplicatePayments", c.duplicatePayments), ("duplicateTransfers", c.duplicateTransfers),
        ]
        for (index, (name, value)) in counters.enumerated() {
            if index > 0 { writer.raw(",") }
            writer.string(name)
            writer.raw(":")
            writer.integer(value)
        }
        writer.raw("}}")
        return writer.bytes
    }

    private static func quantities(_ map: [String: Int], _ writer: inout JSONWriter) {
        writer.raw("{")
        for (index, (id, quantity)) in map.enumerated() {
            if index > 0 { writer.raw(",") }
            writer.string(id)
            writer.raw(":")
            writer.integer(quantity)
        }
        writer.raw("}")
    }

    private static func batches(_ batches: [PendingBatch], _ writer: inout JSONWriter) {
        writer.raw("[")
        for (index, batch) in batches.enumerated() {
            if index > 0 { writer.raw(",") }
            writer.raw("{\"seq\":")
            writer.integer(batch.seq)
            writer.raw(",\"products\":")
            RecordFormat.products(batch.products, into: &writer)
            writer.raw(",\"at\":")
            writer.raw(String(batch.at.timeIntervalSinceReferenceDate))
            if let deadline = batch.deadline {
                writer.raw(",\"deadline\":")
                writer.raw(String(deadline.timeIntervalSinceReferenceDate))
            }
            writer.raw("}")
        }
        writer.raw("]")
    }
}
