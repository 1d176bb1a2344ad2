import BasketSync

/// The library state as the database keeps it: the layout of `SyncState`'s synthesized `Codable`
/// conformance (dates as seconds since 2001, optionals omitted when nil), so that a database
/// written by `JSONEncoder` reads back too. Id-keyed maps are objects here (read byte for byte by
/// ``JSONParser``); `JSONEncoder` writes them as `[id, value, …]` arrays, which read back as well.
///
/// The agent saves the state after every input; Foundation's `JSONEncoder` took a third of each
/// step's instructions, this writer a small part of that. The reader sits beside it: a new field
/// of `SyncState` is added to both here, and the round-trip test fails until it is.
package enum StateFormat {
    /// The state's JSON.
    package static func encode(_ state: SyncState) -> [UInt8] {
        var writer = JSONWriter()
        writer.object { object in
            object.member("syncId", state.syncId)
            object.member("lastOutboxSeq", state.lastOutboxSeq)
            object.member("lastNotificationSeq", state.lastNotificationSeq)
            object.member("lastPaymentSeq", state.lastPaymentSeq)
            object.member("basket", state.basket)
            object.member("confirmed") { quantities(state.confirmed, &$0) }
            if !state.shareFollowedAhead.isEmpty { object.member("shareFollowedAhead") { quantities(state.shareFollowedAhead, &$0) } }
            object.member("pending") { batches(state.pending, &$0) }
            object.member("rolledBack") { batches(state.rolledBack, &$0) }
            if let hostCart = state.hostCart { object.member("hostCart") { quantities(hostCart, &$0) } }
            if let synced = state.hostSyncedThrough { object.member("hostSyncedThrough", synced) }
            if let claim = state.hostClaim { object.member("hostClaim", claim) }
            if let echoed = state.echoedThrough { object.member("echoedThrough", echoed) }
            if let ahead = state.echoedAhead { object.member("echoedAhead", ahead) }
            if let cap = state.acknowledgementCap { object.member("acknowledgementCap", cap) }
            if let notified = state.lastNotified { object.member("lastNotified") { quantities(notified, &$0) } }
            if let base = state.viewBase { object.member("viewBase") { quantities(base, &$0) } }
            if let counted = state.viewCountsThrough { object.member("viewCountsThrough", counted) }
            if let shows = state.cartShowsThrough { object.member("cartShowsThrough", shows) }
            if let paid = state.paidThrough { object.member("paidThrough", paid) }
            if let synced = state.lastNotifiedSyncedThrough { object.member("lastNotifiedSyncedThrough", synced) }
            if let storeId = state.storeId { object.member("storeId", storeId) }
            object.member("mode", state.mode.rawValue)
            object.member("recordedOrders") { writer in
                writer.object { orders in
                    for (order, seq) in state.recordedOrders { orders.member(named: order.string) { $0.integer(seq) } }
                }
            }
            object.member("landedTransfers") { writer in writer.array(state.landedTransfers) { $0.string($1.string) } }
            object.member("counters") { writer in
                writer.object { counters in
                    // Read directly, not through ``counterFields``' key paths (a key path read
                    // cost more than the rest of the state); in the same order, every one of
                    // them (``counterValues(_:)``).
                    for (name, value) in zip(counterNames, counterValues(state.counters)) { counters.member(name, value) }
                }
            }
        }
        return writer.bytes
    }

    /// The counters' names as the writer writes them, in the order of ``counterFields``.
    package static let counterNames: [StaticString] = [
        "updateBaskets", "redirects", "notifications", "settled", "rolledBack", "lateEchoes", "ignored", "paymentsRecorded",
        "paymentsSkipped", "duplicatePayments", "duplicateTransfers", "lateAcknowledgements", "acknowledgementsBeyondOutbox",
        "acknowledgementsWentBack", "staleStates",
    ]

    /// The counters' values in the order of ``counterNames``.
    package static func counterValues(_ c: SyncCounters) -> [UInt64] {
        [c.updateBaskets, c.redirects, c.notifications, c.settled, c.rolledBack, c.lateEchoes, c.ignored, c.paymentsRecorded,
         c.paymentsSkipped, c.duplicatePayments, c.duplicateTransfers, c.lateAcknowledgements, c.acknowledgementsBeyondOutbox,
         c.acknowledgementsWentBack, c.staleStates]
    }

    /// The counter of `name`, nil for a name none has.
    static func counterField(_ name: String) -> WritableKeyPath<SyncCounters, UInt64>? {
        counterFieldsByName[name]
    }
    // Key paths are not Sendable; this map is made once and never changed.
    nonisolated(unsafe) private static let counterFieldsByName = Dictionary(uniqueKeysWithValues: counterFields.map { ($0.0, $0.1) })

    /// Every counter and its name: one list for the writer and the reader, made once (key paths
    /// are not Sendable; it is never changed).
    nonisolated(unsafe) package static let counterFields: [(String, WritableKeyPath<SyncCounters, UInt64>)] = [
        ("updateBaskets", \.updateBaskets), ("redirects", \.redirects), ("notifications", \.notifications),
        ("settled", \.settled), ("rolledBack", \.rolledBack), ("lateEchoes", \.lateEchoes), ("ignored", \.ignored),
        ("paymentsRecorded", \.paymentsRecorded), ("paymentsSkipped", \.paymentsSkipped),
        ("duplicatePayments", \.duplicatePayments), ("duplicateTransfers", \.duplicateTransfers),
        ("lateAcknowledgements", \.lateAcknowledgements), ("acknowledgementsBeyondOutbox", \.acknowledgementsBeyondOutbox),
        ("acknowledgementsWentBack", \.acknowledgementsWentBack), ("staleStates", \.staleStates),
    ]

    /// A map of quantities by id (the host cart, kept beside the state), compactly: a 0x01 byte,
    /// then per entry the id's length (LEB128), its bytes, and the quantity (zigzag LEB128). A
    /// 100,000-line cart is written and read back in a few milliseconds, unlike JSON.
    package static func encodeQuantities(_ map: [ExactID: Int]) -> [UInt8] {
        var bytes: [UInt8] = [0x01]
        bytes.reserveCapacity(1 + map.count * 16)
        func leb(_ value: UInt64) {
            var rest = value
            while rest >= 0x80 {
                bytes.append(UInt8(rest & 0x7F) | 0x80)
                rest >>= 7
            }
            bytes.append(UInt8(rest))
        }
        for (id, quantity) in map {
            var text = id.string
            text.withUTF8 { utf8 in
                leb(UInt64(utf8.count))
                bytes.append(contentsOf: utf8)
            }
            leb(UInt64(bitPattern: Int64((quantity << 1) ^ (quantity >> 63))))
        }
        return bytes
    }

    /// Reads a map written by ``encodeQuantities(_:)`` (or a JSON object, as version 2 first
    /// wrote it); `null` is nil.
    package static func decodeQuantities(_ bytes: [UInt8]) throws(JSONProblem) -> [ExactID: Int]? {
        if bytes.first == 0x01 {
            var map: [ExactID: Int] = [:]
            var index = 1
            func leb() throws(JSONProblem) -> UInt64 {
                var value: UInt64 = 0
                var shift: UInt64 = 0
                while index < bytes.count, shift < 64 {
                    let byte = bytes[index]
                    index += 1
                    value |= UInt64(byte & 0x7F) << shift
                    if byte < 0x80 { return value }
                    shift += 7
                }
                throw JSONProblem(offset: index, reason: "the saved cart is cut short")
            }
            while index < bytes.count {
                let length = Int(try leb())
                guard length <= bytes.count - index else { throw JSONProblem(offset: index, reason: "the saved cart is cut short") }
                let id = bytes.withUnsafeBufferPointer { String(decoding: UnsafeBufferPointer(rebasing: $0[index..<index + length]), as: UTF8.self) }
                index += length
                let zigzag = try leb()
                map[ExactID(id)] = Int(Int64(bitPattern: (zigzag >> 1) ^ (0 &- (zigzag & 1))))
            }
            return map
        }
        let root = try JSONParser.parse(bytes)
        if root.isNull { return nil }
        guard case let .object(members) = root.value else { throw JSONProblem(offset: root.offset, reason: "quantities must be an object") }
        var map: [ExactID: Int] = [:]
        map.reserveCapacity(members.count)
        for (id, member) in members {
            guard let quantity = member.integer else { throw JSONProblem(offset: member.offset, reason: "a quantity must be a whole number") }
            map[ExactID(id)] = quantity
        }
        return map
    }

    private static func quantities(_ map: [ExactID: Int], _ writer: inout JSONWriter) {
        writer.object { object in
            for (id, quantity) in map { object.member(named: id.string) { $0.integer(quantity) } }
        }
    }

    private static func batches(_ batches: [PendingBatch], _ writer: inout JSONWriter) {
        writer.array(batches) { writer, batch in
            writer.object { object in
                object.member("seq", batch.seq)
                object.member("products", products: batch.products)
                object.member("at") { $0.raw(text: String(batch.at.timeIntervalSinceReferenceDate)) }
                if let deadline = batch.deadline { object.member("deadline") { $0.raw(text: String(deadline.timeIntervalSinceReferenceDate)) } }
            }
        }
    }

    /// One pending batch on its own (a row of the database's `pending` table).
    package static func encode(_ batch: PendingBatch) -> [UInt8] {
        var writer = JSONWriter()
        batches([batch], &writer)
        return writer.bytes
    }

    /// Reads a batch written by ``encode(_:)-(PendingBatch)``.
    package static func decodeBatch(_ bytes: [UInt8]) throws(JSONProblem) -> PendingBatch {
        // In one pass where it can (a cart taken up again reads each of its rows); else through
        // the tree of nodes, which says what is wrong and where.
        if let batches = StateFastReader.readBatches(bytes), batches.count == 1 { return batches[0] }
        return try decodeBatchTree(bytes)
    }

    /// Reads a batch through the tree of nodes (every form ``decodeBatch(_:)`` takes).
    package static func decodeBatchTree(_ bytes: [UInt8]) throws(JSONProblem) -> PendingBatch {
        let root = try JSONParser.parse(bytes)
        let batches = try StateReader(node: JSONNode(value: .object([("pending", root)]), offset: 0)).batches("pending")
        guard batches.count == 1 else { throw JSONProblem(offset: 0, reason: "a pending batch row must hold one batch") }
        return batches[0]
    }

    /// Reads a state written by ``encode(_:)`` (or by `JSONEncoder`): in one pass where it can
    /// (``StateFastReader``), else through the tree of nodes, which says what is wrong and where.
    package static func decode(_ bytes: [UInt8]) throws(JSONProblem) -> SyncState {
        if let state = StateFastReader.read(bytes) { return state }
        return try decodeTree(bytes)
    }

    /// Reads a state through the tree of nodes (every form ``decode(_:)`` takes).
    package static func decodeTree(_ bytes: [UInt8]) throws(JSONProblem) -> SyncState {
        let root = try JSONParser.parse(bytes)
        let object = StateReader(node: root)
        var state = SyncState(syncId: try object.string("syncId"))
        state.lastOutboxSeq = try object.unsigned("lastOutboxSeq")
        state.lastNotificationSeq = try object.unsigned("lastNotificationSeq")
        state.lastPaymentSeq = try object.unsigned("lastPaymentSeq")
        state.basket = try object.unsigned("basket")
        state.confirmed = try object.quantities("confirmed")
        state.shareFollowedAhead = try object.optional("shareFollowedAhead") { (reader) throws(JSONProblem) in try reader.quantities("shareFollowedAhead") } ?? [:]
        state.pending = try object.batches("pending")
        state.rolledBack = try object.batches("rolledBack")
        state.hostCart = try object.optional("hostCart") { (reader) throws(JSONProblem) in try reader.quantities("hostCart") }
        state.hostSyncedThrough = try object.optional("hostSyncedThrough") { (reader) throws(JSONProblem) in try reader.unsigned("hostSyncedThrough") }
        state.hostClaim = try object.optional("hostClaim") { (reader) throws(JSONProblem) in try reader.unsigned("hostClaim") }
        state.echoedThrough = try object.optional("echoedThrough") { (reader) throws(JSONProblem) in try reader.unsigned("echoedThrough") }
        state.echoedAhead = try object.optional("echoedAhead") { (reader) throws(JSONProblem) in try reader.unsigned("echoedAhead") }
        state.acknowledgementCap = try object.optional("acknowledgementCap") { (reader) throws(JSONProblem) in try reader.unsigned("acknowledgementCap") }
        state.lastNotified = try object.optional("lastNotified") { (reader) throws(JSONProblem) in try reader.quantities("lastNotified") }
        state.viewBase = try object.optional("viewBase") { (reader) throws(JSONProblem) in try reader.quantities("viewBase") }
        state.viewCountsThrough = try object.optional("viewCountsThrough") { (reader) throws(JSONProblem) in try reader.unsigned("viewCountsThrough") }
        state.cartShowsThrough = try object.optional("cartShowsThrough") { (reader) throws(JSONProblem) in try reader.unsigned("cartShowsThrough") }
        state.paidThrough = try object.optional("paidThrough") { (reader) throws(JSONProblem) in try reader.unsigned("paidThrough") }
        state.lastNotifiedSyncedThrough = try object.optional("lastNotifiedSyncedThrough") { (reader) throws(JSONProblem) in try reader.unsigned("lastNotifiedSyncedThrough") }
        state.storeId = try object.optional("storeId") { (reader) throws(JSONProblem) in try reader.string("storeId") }
        guard let mode = SyncMode(rawValue: try object.string("mode")) else { throw object.problem("mode") }
        state.mode = mode
        for (order, node) in try object.idKeyed("recordedOrders") {
            guard let seq = node.integer, seq >= 0 else { throw JSONProblem(offset: node.offset, reason: "a payment seq must be a whole number") }
            state.recordedOrders[order] = UInt64(seq)
        }
        for node in try object.elements("landedTransfers") {
            guard case let .string(transfer) = node.value else { throw JSONProblem(offset: node.offset, reason: "a transfer id must be a string") }
            state.landedTransfers.insert(ExactID(transfer))
        }
        let counters = StateReader(node: try object.node("counters"))
        // A counter an older version did not have starts at 0.
        for (name, field) in counterFields where counters.node[name] != nil { state.counters[keyPath: field] = try counters.unsigned(name) }
        return state
    }
}

/// Reads the members of one object of the state; a missing or mistyped member is a problem at its place.
private struct StateReader {
    let node: JSONNode

    func problem(_ key: String) -> JSONProblem {
        JSONProblem(offset: node[key]?.offset ?? node.offset, reason: "\"\(key)\" is missing or not of its type")
    }

    func node(_ key: String) throws(JSONProblem) -> JSONNode {
        guard let member = node[key] else { throw problem(key) }
        return member
    }

    func optional<T>(_ key: String, _ read: (StateReader) throws(JSONProblem) -> T) throws(JSONProblem) -> T? {
        guard let member = node[key], !member.isNull else { return nil }
        return try read(self)
    }

    func string(_ key: String) throws(JSONProblem) -> String {
        guard case let .string(text) = try node(key).value else { throw problem(key) }
        return text
    }

    func unsigned(_ key: String) throws(JSONProblem) -> UInt64 {
        guard case let .number(text) = try node(key).value, let value = UInt64(text) else { throw problem(key) }
        return value
    }

    func seconds(_ key: String) throws(JSONProblem) -> Date {
        guard case let .number(text) = try node(key).value, let value = Double(text) else { throw problem(key) }
        return Date(timeIntervalSinceReferenceDate: value)
    }

    func members(_ key: String) throws(JSONProblem) -> [(key: String, node: JSONNode)] {
        guard case let .object(members) = try node(key).value else { throw problem(key) }
        return members
    }

    func elements(_ key: String) throws(JSONProblem) -> [JSONNode] {
        guard case let .array(elements) = try node(key).value else { throw problem(key) }
        return elements
    }

    func quantities(_ key: String) throws(JSONProblem) -> [ExactID: Int] {
        var map: [ExactID: Int] = [:]
        for (id, member) in try idKeyed(key) {
            guard let quantity = member.integer else { throw JSONProblem(offset: member.offset, reason: "a quantity must be a whole number") }
            map[id] = quantity
        }
        return map
    }

    /// A map keyed by ids: an object (this writer, and `JSONEncoder` before ids were `ExactID`),
    /// or the array `[id, value, …]` that `JSONEncoder` writes for an `ExactID`-keyed map.
    func idKeyed(_ key: String) throws(JSONProblem) -> [(id: ExactID, node: JSONNode)] {
        switch try node(key).value {
        case let .object(members):
            return members.map { (ExactID($0.key), $0.node) }
        case let .array(elements) where elements.count % 2 == 0:
            return try stride(from: 0, to: elements.count, by: 2).map { (index) throws(JSONProblem) in
                guard case let .string(id) = elements[index].value else {
                    throw JSONProblem(offset: elements[index].offset, reason: "an id must be a string")
                }
                return (ExactID(id), elements[index + 1])
            }
        default:
            throw problem(key)
        }
    }

    func batches(_ key: String) throws(JSONProblem) -> [PendingBatch] {
        var batches: [PendingBatch] = []
        for element in try elements(key) {
            let batch = StateReader(node: element)
            var products: [RetailerProduct] = []
            for line in try batch.elements("products") {
                let fields = StateReader(node: line)
                guard let quantity = try fields.node("quantity").integer else { throw fields.problem("quantity") }
                products.append(RetailerProduct(id: try fields.string("id"), quantity: quantity))
            }
            let deadline = try batch.optional("deadline") { (reader) throws(JSONProblem) in try reader.seconds("deadline") }
            batches.append(PendingBatch(seq: try batch.unsigned("seq"), products: products, at: try batch.seconds("at"), deadline: deadline))
        }
        return batches
    }
}
