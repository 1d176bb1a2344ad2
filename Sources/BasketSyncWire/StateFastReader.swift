import BasketSync


/// Reads a state as ``StateFormat/encode(_:)`` writes it in one pass over its bytes, with no tree
/// of nodes in between: the agent reads a cart's state whenever it takes the cart up again (at
/// its start, and for each cart changed in a tree of thousands), and the tree decoder took a
/// tenth of that work.
///
/// It takes only what it is sure of — an object of the state's keys, each once, whose strings
/// hold no escape, whose numbers are valid JSON — and gives up (nil) on anything else: the tree
/// decoder then reads the bytes, and says what is wrong where something is. Where it answers,
/// its answer is the tree decoder's: the same conversions of the same texts.
package struct StateFastReader {
    private let bytes: UnsafeBufferPointer<UInt8>
    private var index = 0

    private init(_ bytes: UnsafeBufferPointer<UInt8>) { self.bytes = bytes }

    /// The state in `bytes`; nil where the tree decoder must read them.
    package static func read(_ bytes: [UInt8]) -> SyncState? {
        bytes.withUnsafeBufferPointer { buffer in
            var reader = StateFastReader(buffer)
            guard let state = reader.state() else { return nil }
            reader.skipSpaces()
            return reader.index == buffer.count ? state : nil
        }
    }

    // MARK: The state

    /// The keys of the state that must be there.
    private static let required: Set<String> = ["syncId", "lastOutboxSeq", "lastNotificationSeq", "lastPaymentSeq", "basket", "confirmed",
                                                "pending", "rolledBack", "mode", "recordedOrders", "landedTransfers", "counters"]

    private mutating func state() -> SyncState? {
        var state = SyncState(syncId: "")
        var seen: Set<String> = []
        let ok = object { (reader, key) -> Bool in
            guard Self.isPlain(key), seen.insert(key).inserted else { return false }
            switch key {
            case "syncId": guard let value = reader.string() else { return false }; state.syncId = value
            case "lastOutboxSeq": guard let value = reader.unsigned() else { return false }; state.lastOutboxSeq = value
            case "lastNotificationSeq": guard let value = reader.unsigned() else { return false }; state.lastNotificationSeq = value
            case "lastPaymentSeq": guard let value = reader.unsigned() else { return false }; state.lastPaymentSeq = value
            case "basket": guard let value = reader.unsigned() else { return false }; state.basket = value
            case "confirmed": guard let value = reader.quantities() else { return false }; state.confirmed = value
            case "shareFollowedAhead": guard let value = reader.quantities() else { return false }; state.shareFollowedAhead = value
            case "pending": guard let value = reader.batches() else { return false }; state.pending = value
            case "rolledBack": guard let value = reader.batches() else { return false }; state.rolledBack = value
            case "hostCart": guard let value = reader.quantities() else { return false }; state.hostCart = value
            case "hostSyncedThrough": guard let value = reader.unsigned() else { return false }; state.hostSyncedThrough = value
            case "hostClaim": guard let value = reader.unsigned() else { return false }; state.hostClaim = value
            case "echoedThrough": guard let value = reader.unsigned() else { return false }; state.echoedThrough = value
            case "echoedAhead": guard let value = reader.unsigned() else { return false }; state.echoedAhead = value
            case "acknowledgementCap": guard let value = reader.unsigned() else { return false }; state.acknowledgementCap = value
            case "lastNotified": guard let value = reader.quantities() else { return false }; state.lastNotified = value
            case "viewBase": guard let value = reader.quantities() else { return false }; state.viewBase = value
            case "viewCountsThrough": guard let value = reader.unsigned() else { return false }; state.viewCountsThrough = value
            case "cartShowsThrough": guard let value = reader.unsigned() else { return false }; state.cartShowsThrough = value
            case "paidThrough": guard let value = reader.unsigned() else { return false }; state.paidThrough = value
            case "lastNotifiedSyncedThrough": guard let value = reader.unsigned() else { return false }; state.lastNotifiedSyncedThrough = value
            case "storeId": guard let value = reader.string() else { return false }; state.storeId = value
            case "mode":
                guard let text = reader.string(), let mode = SyncMode(rawValue: text) else { return false }
                state.mode = mode
            case "recordedOrders":
                return reader.object { (reader, order) -> Bool in
                    guard let seq = reader.integer(), seq >= 0 else { return false }
                    state.recordedOrders[ExactID(order)] = UInt64(seq)
                    return true
                }
            case "landedTransfers":
                return reader.array { reader -> Bool in
                    guard let transfer = reader.string() else { return false }
                    state.landedTransfers.insert(ExactID(transfer))
                    return true
                }
            case "counters":
                return reader.record { (reader, name) -> Bool in
                    guard let field = StateFormat.counterField(name), let value = reader.unsigned() else { return false }
                    state.counters[keyPath: field] = value
                    return true
                }
            default: return false
            }
            return true
        }
        guard ok, seen.isSuperset(of: Self.required) else { return nil }
        return state
    }

    private mutating func quantities() -> [ExactID: Int]? {
        var map: [ExactID: Int] = [:]
        let ok = object { (reader, id) -> Bool in
            // Ids are exact (`K` and the Kelvin sign are two); a repeated one: the last one
            // said, as the tree decoder reads it.
            guard let quantity = reader.integer() else { return false }
            map[ExactID(id)] = quantity
            return true
        }
        return ok ? map : nil
    }

    private mutating func batches() -> [PendingBatch]? {
        var batches: [PendingBatch] = []
        let ok = array { reader -> Bool in
            var seq: UInt64?, at: Date?, deadline: Date?
            var products: [RetailerProduct]?
            let ok = reader.record { (reader, key) -> Bool in
                switch key {
                case "seq": seq = reader.unsigned(); return seq != nil
                case "at": at = reader.seconds(); return at != nil
                case "deadline": deadline = reader.seconds(); return deadline != nil
                case "products":
                    var lines: [RetailerProduct] = []
                    let ok = reader.array { reader -> Bool in
                        var id: String?, quantity: Int?
                        let ok = reader.record { (reader, field) -> Bool in
                            switch field {
                            case "id": id = reader.string(); return id != nil
                            case "quantity": quantity = reader.integer(); return quantity != nil
                            default: return false
                            }
                        }
                        guard ok, let id, let quantity else { return false }
                        lines.append(RetailerProduct(id: id, quantity: quantity))
                        return true
                    }
                    products = lines
                    return ok
                default: return false
                }
            }
            guard ok, let seq, let at, let products else { return false }
            batches.append(PendingBatch(seq: seq, products: products, at: at, deadline: deadline))
            return true
        }
        return ok ? batches : nil
    }

    /// A key of the state's own (ASCII): compared as `String`s are, as its bytes are (the tree
    /// decoder compares keys byte for byte; a key with another byte is left to it).
    private static func isPlain(_ key: String) -> Bool { key.utf8.allSatisfy { $0 < 0x80 } }

    // MARK: JSON, the part the state uses

    private mutating func skipSpaces() {
        while index < bytes.count, bytes[index] == 0x20 || bytes[index] == 0x0A || bytes[index] == 0x0D || bytes[index] == 0x09 { index += 1 }
    }

    private mutating func take(_ byte: UInt8) -> Bool {
        skipSpaces()
        guard index < bytes.count, bytes[index] == byte else { return false }
        index += 1
        return true
    }

    /// An object: `member` reads each member's value after its key; false gives up.
    private mutating func object(_ member: (inout StateFastReader, String) -> Bool) -> Bool {
        guard take(UInt8(ascii: "{")) else { return false }
        if take(UInt8(ascii: "}")) { return true }
        repeat {
            guard let key = string(), take(UInt8(ascii: ":")), member(&self, key) else { return false }
        } while take(UInt8(ascii: ","))
        return take(UInt8(ascii: "}"))
    }

    /// An object of named fields, each key ASCII and said once (a repeated or other key is the
    /// tree decoder's to judge: false gives up); `member` as in ``object(_:)``.
    private mutating func record(_ member: (inout StateFastReader, String) -> Bool) -> Bool {
        var seen: Set<String> = []
        return object { (reader, key) -> Bool in Self.isPlain(key) && seen.insert(key).inserted && member(&reader, key) }
    }

    /// An array: `element` reads each element; false gives up.
    private mutating func array(_ element: (inout StateFastReader) -> Bool) -> Bool {
        guard take(UInt8(ascii: "[")) else { return false }
        if take(UInt8(ascii: "]")) { return true }
        repeat {
            guard element(&self) else { return false }
        } while take(UInt8(ascii: ","))
        return take(UInt8(ascii: "]"))
    }

    /// A string without escapes or control characters, valid UTF-8; nil otherwise.
    private mutating func string() -> String? {
        guard take(UInt8(ascii: "\"")) else { return nil }
        let start = index
        while index < bytes.count {
            let byte = bytes[index]
            if byte == UInt8(ascii: "\"") {
                let text = String(validating: UnsafeBufferPointer(rebasing: bytes[start..<index]), as: UTF8.self)
                index += 1
                return text
            }
            if byte == UInt8(ascii: "\\") || byte < 0x20 { return nil }
            index += 1
        }
        return nil
    }

    /// The text of a JSON number (its grammar checked, as the parser checks it); nil otherwise.
    private mutating func number() -> Substring? {
        skipSpaces()
        let start = index
        func digits(_ reader: inout StateFastReader) -> Int {
            let first = reader.index
            while reader.index < reader.bytes.count, reader.bytes[reader.index] >= 0x30, reader.bytes[reader.index] <= 0x39 { reader.index += 1 }
            return reader.index - first
        }
        if index < bytes.count, bytes[index] == UInt8(ascii: "-") { index += 1 }
        let integerStart = index
        let integerDigits = digits(&self)
        guard integerDigits > 0, integerDigits == 1 || bytes[integerStart] != 0x30 else { return nil }
        if index < bytes.count, bytes[index] == UInt8(ascii: ".") {
            index += 1
            guard digits(&self) > 0 else { return nil }
        }
        if index < bytes.count, bytes[index] == UInt8(ascii: "e") || bytes[index] == UInt8(ascii: "E") {
            index += 1
            if index < bytes.count, bytes[index] == UInt8(ascii: "+") || bytes[index] == UInt8(ascii: "-") { index += 1 }
            guard digits(&self) > 0 else { return nil }
        }
        return Substring(decoding: UnsafeBufferPointer(rebasing: bytes[start..<index]), as: UTF8.self)
    }

    /// As ``JSONNode/integer``: an exact integer, no fraction nor exponent.
    private mutating func integer() -> Int? {
        guard let text = number(), !text.contains(where: { $0 == "." || $0 == "e" || $0 == "E" }) else { return nil }
        return Int(text)
    }

    /// As the tree decoder's `unsigned`.
    private mutating func unsigned() -> UInt64? { number().flatMap { UInt64($0) } }

    /// As the tree decoder's `seconds`.
    private mutating func seconds() -> Date? {
        number().flatMap { Double($0) }.map { Date(timeIntervalSinceReferenceDate: $0) }
    }
}
