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

    /// The batches of a `pending` row (an array, as ``StateFormat/encode(_:)-(PendingBatch)``
    /// writes one); nil where the tree decoder must read them.
    package static func readBatches(_ bytes: [UInt8]) -> [PendingBatch]? {
        bytes.withUnsafeBufferPointer { buffer in
            var reader = StateFastReader(buffer)
            guard let batches = reader.batches() else { return nil }
            reader.skipSpaces()
            return reader.index == buffer.count ? batches : nil
        }
    }

    // MARK: The state

    /// The keys of the state, named as the writer names them.
    private enum Key: Int, CaseIterable {
        case syncId, lastOutboxSeq, lastNotificationSeq, lastPaymentSeq, basket, confirmed, shareFollowedAhead, pending, rolledBack,
             hostCart, hostSyncedThrough, hostClaim, echoedThrough, echoedAhead, acknowledgementCap, lastNotified, viewBase,
             viewCountsThrough, cartShowsThrough, paidThrough, lastNotifiedSyncedThrough, storeId, mode, recordedOrders,
             landedTransfers, counters

        /// Each key's bytes, in the order of the cases.
        static let names = allCases.map { Array(String(describing: $0).utf8) }
    }

    /// The keys that must be there, one bit each.
    private static let required = [Key.syncId, .lastOutboxSeq, .lastNotificationSeq, .lastPaymentSeq, .basket, .confirmed, .pending,
                                   .rolledBack, .mode, .recordedOrders, .landedTransfers, .counters].reduce(UInt64(0)) { $0 | 1 << $1.rawValue }

    /// The counters' names, in the order of ``StateFormat/counterFields``.
    private static let counterNames = StateFormat.counterFields.map { Array($0.0.utf8) }
    private static let batchNames = ["seq", "at", "deadline", "products"].map { Array($0.utf8) }
    private static let lineNames = ["id", "quantity"].map { Array($0.utf8) }

    private mutating func state() -> SyncState? {
        var state = SyncState(syncId: "")
        let seen = fields(Key.names) { (reader, field) -> Bool in
            switch Key(rawValue: field)! {
            case .syncId: guard let value = reader.string() else { return false }; state.syncId = value
            case .lastOutboxSeq: guard let value = reader.unsigned() else { return false }; state.lastOutboxSeq = value
            case .lastNotificationSeq: guard let value = reader.unsigned() else { return false }; state.lastNotificationSeq = value
            case .lastPaymentSeq: guard let value = reader.unsigned() else { return false }; state.lastPaymentSeq = value
            case .basket: guard let value = reader.unsigned() else { return false }; state.basket = value
            case .confirmed: guard let value = reader.quantities() else { return false }; state.confirmed = value
            case .shareFollowedAhead: guard let value = reader.quantities() else { return false }; state.shareFollowedAhead = value
            case .pending: guard let value = reader.batches() else { return false }; state.pending = value
            case .rolledBack: guard let value = reader.batches() else { return false }; state.rolledBack = value
            case .hostCart: guard let value = reader.quantities() else { return false }; state.hostCart = value
            case .hostSyncedThrough: guard let value = reader.unsigned() else { return false }; state.hostSyncedThrough = value
            case .hostClaim: guard let value = reader.unsigned() else { return false }; state.hostClaim = value
            case .echoedThrough: guard let value = reader.unsigned() else { return false }; state.echoedThrough = value
            case .echoedAhead: guard let value = reader.unsigned() else { return false }; state.echoedAhead = value
            case .acknowledgementCap: guard let value = reader.unsigned() else { return false }; state.acknowledgementCap = value
            case .lastNotified: guard let value = reader.quantities() else { return false }; state.lastNotified = value
            case .viewBase: guard let value = reader.quantities() else { return false }; state.viewBase = value
            case .viewCountsThrough: guard let value = reader.unsigned() else { return false }; state.viewCountsThrough = value
            case .cartShowsThrough: guard let value = reader.unsigned() else { return false }; state.cartShowsThrough = value
            case .paidThrough: guard let value = reader.unsigned() else { return false }; state.paidThrough = value
            case .lastNotifiedSyncedThrough: guard let value = reader.unsigned() else { return false }; state.lastNotifiedSyncedThrough = value
            case .storeId: guard let value = reader.string() else { return false }; state.storeId = value
            case .mode:
                guard let text = reader.string(), let mode = SyncMode(rawValue: text) else { return false }
                state.mode = mode
            case .recordedOrders:
                return reader.object { (reader, order) -> Bool in
                    guard let seq = reader.integer(), seq >= 0 else { return false }
                    // An order said twice: the tree decoder's to refuse.
                    return state.recordedOrders.updateValue(UInt64(seq), forKey: ExactID(order)) == nil
                }
            case .landedTransfers:
                return reader.array { reader -> Bool in
                    guard let transfer = reader.string() else { return false }
                    state.landedTransfers.insert(ExactID(transfer))
                    return true
                }
            case .counters:
                return reader.fields(Self.counterNames) { (reader, field) -> Bool in
                    guard let value = reader.unsigned() else { return false }
                    state.counters[keyPath: StateFormat.counterFields[field].1] = value
                    return true
                } != nil
            }
            return true
        }
        guard let seen, seen & Self.required == Self.required else { return nil }
        return state
    }

    private mutating func quantities() -> [ExactID: Int]? {
        var map: [ExactID: Int] = [:]
        let ok = object { (reader, id) -> Bool in
            // Ids are exact (`K` and the Kelvin sign are two); one said twice is the tree
            // decoder's to refuse.
            guard let quantity = reader.integer() else { return false }
            return map.updateValue(quantity, forKey: ExactID(id)) == nil
        }
        return ok ? map : nil
    }

    private mutating func batches() -> [PendingBatch]? {
        var batches: [PendingBatch] = []
        let ok = array { reader -> Bool in
            var seq: UInt64?, at: Date?, deadline: Date?
            var products: [RetailerProduct]?
            let ok = reader.fields(Self.batchNames) { (reader, field) -> Bool in
                switch field {
                case 0: seq = reader.unsigned(); return seq != nil
                case 1: at = reader.seconds(); return at != nil
                case 2: deadline = reader.seconds(); return deadline != nil
                default:
                    var lines: [RetailerProduct] = []
                    let ok = reader.array { reader -> Bool in
                        var id: String?, quantity: Int?
                        let ok = reader.fields(Self.lineNames) { (reader, field) -> Bool in
                            if field == 0 { id = reader.string(); return id != nil }
                            quantity = reader.integer()
                            return quantity != nil
                        } != nil
                        guard ok, let id, let quantity else { return false }
                        lines.append(RetailerProduct(id: id, quantity: quantity))
                        return true
                    }
                    products = lines
                    return ok
                }
            } != nil
            guard ok, let seq, let at, let products else { return false }
            batches.append(PendingBatch(seq: seq, products: products, at: at, deadline: deadline))
            return true
        }
        return ok ? batches : nil
    }

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

    /// An object of named fields, each key one of `names` (at most 64) and said once: `member`
    /// reads the value of the key at its index in `names`. The keys met, one bit each; nil where
    /// it gives up (another key, a key said twice: the tree decoder's to judge).
    private mutating func fields(_ names: [[UInt8]], _ member: (inout StateFastReader, Int) -> Bool) -> UInt64? {
        guard take(UInt8(ascii: "{")) else { return nil }
        var seen: UInt64 = 0
        if take(UInt8(ascii: "}")) { return seen }
        repeat {
            guard let key = rawString(), let field = field(key, in: names), seen & 1 << field == 0, take(UInt8(ascii: ":")) else { return nil }
            seen |= 1 << field
            guard member(&self, field) else { return nil }
        } while take(UInt8(ascii: ","))
        return take(UInt8(ascii: "}")) ? seen : nil
    }

    /// The index in `names` of the key whose bytes are at `key`.
    private func field(_ key: Range<Int>, in names: [[UInt8]]) -> Int? {
        for (index, name) in names.enumerated() where name.count == key.count {
            if name.withUnsafeBufferPointer({ $0.elementsEqual(UnsafeBufferPointer(rebasing: bytes[key])) }) { return index }
        }
        return nil
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
        rawString().flatMap { String(validating: UnsafeBufferPointer(rebasing: bytes[$0]), as: UTF8.self) }
    }

    /// Where the bytes of a string without escapes or control characters are (not checked as
    /// UTF-8); nil for any other string.
    private mutating func rawString() -> Range<Int>? {
        guard take(UInt8(ascii: "\"")) else { return nil }
        let start = index
        while index < bytes.count {
            let byte = bytes[index]
            if byte == UInt8(ascii: "\"") {
                index += 1
                return start..<(index - 1)
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

    /// As ``JSONNode/integer``: an exact integer, no fraction nor exponent (as `Int(text)` reads
    /// the number's text: nil past Int's range).
    private mutating func integer() -> Int? {
        guard let (negative, magnitude) = whole() else { return nil }
        if negative { return magnitude <= UInt64(Int.max) + 1 ? Int(truncatingIfNeeded: 0 &- magnitude) : nil }
        return magnitude <= UInt64(Int.max) ? Int(magnitude) : nil
    }

    /// As the tree decoder's `unsigned` (`UInt64(text)`: "-0" is 0, any other minus nil).
    private mutating func unsigned() -> UInt64? {
        guard let (negative, magnitude) = whole() else { return nil }
        return negative && magnitude != 0 ? nil : magnitude
    }

    /// A number without fraction nor exponent, read from its digits: its sign and magnitude; nil
    /// for any other number, a magnitude past UInt64, or what is not a number.
    private mutating func whole() -> (negative: Bool, magnitude: UInt64)? {
        skipSpaces()
        let negative = index < bytes.count && bytes[index] == UInt8(ascii: "-")
        if negative { index += 1 }
        let first = index
        var magnitude: UInt64 = 0
        var overflow = false
        while index < bytes.count, bytes[index] >= 0x30, bytes[index] <= 0x39 {
            let (tens, over) = magnitude.multipliedReportingOverflow(by: 10)
            let (sum, carry) = tens.addingReportingOverflow(UInt64(bytes[index] - 0x30))
            magnitude = sum
            overflow = overflow || over || carry
            index += 1
        }
        guard index > first, index - first == 1 || bytes[first] != 0x30, !overflow else { return nil }
        // A fraction or an exponent: not a whole number (the read gives up either way).
        if index < bytes.count, bytes[index] == UInt8(ascii: ".") || bytes[index] == UInt8(ascii: "e") || bytes[index] == UInt8(ascii: "E") { return nil }
        return (negative, magnitude)
    }

    /// As the tree decoder's `seconds`.
    private mutating func seconds() -> Date? {
        number().flatMap { Double($0) }.map { Date(timeIntervalSinceReferenceDate: $0) }
    }
}
