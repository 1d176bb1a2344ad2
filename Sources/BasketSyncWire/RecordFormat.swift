import BasketSync

/// The JSON Lines form of each record — outbox, notification, payment: one object per line,
/// `seq` first, compact, deterministic — and its reader, for `apply` and the projections' catch-up.
package enum RecordFormat {
    /// The outbox line of `record`, ending in a newline.
    package static func line(_ record: OutboxRecord) -> [UInt8] {
        line { object in
            object.member("seq", record.seq)
            object.member("id", record.id)
            object.member("type", record.type.rawValue)
            object.member("at", Timestamp.text(record.at))
            if let source = record.source { object.member("source", source) }
            if let transferId = record.transferId { object.member("transferId", transferId) }
            if record.type == .updateBasket { object.member("products", products: record.products) }
        }
    }

    /// The notifications line of `notification`, ending in a newline.
    package static func line(_ notification: BasketNotification) -> [UInt8] {
        line { object in
            object.member("seq", notification.seq)
            object.member("type", "notifyRetailerBasketChanged")
            object.member("at", Timestamp.text(notification.at))
            object.member("products", products: notification.products)
            object.member("syncedThrough", notification.syncedThrough)
            object.member("basket", notification.basket)
        }
    }

    /// The payments line of `payment`, ending in a newline.
    package static func line(_ payment: PaymentRecord) -> [UInt8] {
        line { object in
            object.member("seq", payment.seq)
            object.member("type", payment.type.rawValue)
            object.member("at", Timestamp.text(payment.at))
            object.member("status", payment.status.rawValue)
            if let reason = payment.reason { object.member("reason", reason.rawValue) }
            object.member("storeId", payment.storeId)
            object.member("orderId", payment.orderId)
            object.member("totalPrice", payment.totalPrice.text)
            object.member("products", products: payment.products)
            object.member("mealzProducts", products: payment.mealzProducts)
            object.member("basket", payment.basket)
        }
    }

    /// One record: an object on one line, `seq` first.
    private static func line(_ members: (inout JSONObjectWriter) -> Void) -> [UInt8] {
        var writer = JSONWriter()
        writer.object(members)
        writer.raw("\n")
        return writer.bytes
    }

    // MARK: Reading back

    /// The seq of a line this format wrote: it starts with `{"seq":N,`; 0 for any other line —
    /// one numbered past ``SyncState/largestSeq`` too (none this format writes).
    package static func seq(ofLine line: some Collection<UInt8>) -> UInt64 {
        let number = number(ofLine: line)
        return number.pastLargest ? 0 : number.value
    }

    /// Whether `line` starts as a record (`{"seq":N`) numbered past ``SyncState/largestSeq``.
    package static func isNumberedPastLargest(_ line: some Collection<UInt8>) -> Bool { number(ofLine: line).pastLargest }

    private static func number(ofLine line: some Collection<UInt8>) -> (value: UInt64, pastLargest: Bool) {
        let prefix = "{\"seq\":".utf8
        guard line.starts(with: prefix) else { return (0, false) }
        var value: UInt64 = 0
        for byte in line.dropFirst(prefix.count) {
            guard (0x30...0x39).contains(byte) else { break }
            value = value * 10 + UInt64(byte - 0x30)
            if value > SyncState.largestSeq { return (0, true) }
        }
        return (value, false)
    }

    /// The `at` of a record line, as written (`2026-11-30T09:30:00.123Z`, which sorts as it
    /// reads), without parsing the line: every record writes it before any field a user gives.
    /// Nil when the line does not start that way.
    package static func at(ofLine line: [UInt8]) -> String? {
        let marker = Array(",\"at\":\"".utf8)
        let window = min(line.count, 160)
        guard window >= marker.count + 24 else { return nil }
        var index = 0
        while index + marker.count + 24 <= window {
            if line[index] == marker[0], Array(line[index..<index + marker.count]) == marker {
                let start = index + marker.count
                let text = String(decoding: line[start..<start + 24], as: UTF8.self)
                return Timestamp.date(text) == nil ? nil : text
            }
            index += 1
        }
        return nil
    }

    /// Reads an outbox line back (with or without its newline).
    package static func outboxRecord(_ line: [UInt8]) throws(JSONProblem) -> OutboxRecord {
        let reader = try RecordReader(line)
        let type = try reader.enumeration("type", OutboxRecord.RecordType.self)
        return OutboxRecord(
            seq: try reader.seq(), id: try reader.string("id"), type: type, at: try reader.date(),
            source: try reader.optionalString("source"),
            products: type == .updateBasket ? try reader.products("products") : [],
            transferId: try reader.optionalString("transferId"))
    }

    /// Reads a notifications line back.
    package static func notification(_ line: [UInt8]) throws(JSONProblem) -> BasketNotification {
        let reader = try RecordReader(line)
        return BasketNotification(
            seq: try reader.seq(), at: try reader.date(), products: try reader.products("products"),
            syncedThrough: try reader.optionalInteger("syncedThrough"),
            // Lines written before notifications carried their basket belong to the first one
            // as far as they tell (recovery takes the basket from the payments too).
            basket: try reader.optionalInteger("basket") ?? 1)
    }

    /// Reads a payments line back.
    package static func payment(_ line: [UInt8]) throws(JSONProblem) -> PaymentRecord {
        let reader = try RecordReader(line)
        guard let total = Money(try reader.string("totalPrice")) else { throw reader.problem("totalPrice", "is not an amount") }
        return PaymentRecord(
            seq: try reader.seq(), type: try reader.enumeration("type", PaymentRecord.PaymentType.self), at: try reader.date(),
            status: try reader.enumeration("status", PaymentRecord.Status.self),
            reason: try reader.optionalString("reason").map { (text) throws(JSONProblem) in
                guard let reason = PaymentRecord.SkipReason(rawValue: text) else { throw reader.problem("reason", "is unknown") }
                return reason
            },
            storeId: try reader.optionalString("storeId"), orderId: try reader.optionalString("orderId"),
            totalPrice: total, products: try reader.products("products"),
            mealzProducts: try reader.products("mealzProducts"), basket: try reader.integer("basket"))
    }
}

/// Reads the members of one record line; a missing or mistyped member is a problem at its place.
private struct RecordReader {
    let root: JSONNode

    init(_ line: [UInt8]) throws(JSONProblem) {
        root = try JSONParser.parse(Array(line.last == 0x0A ? line.dropLast() : line[...]))
    }

    func problem(_ key: String, _ reason: String) -> JSONProblem {
        JSONProblem(offset: root[key]?.offset ?? root.offset, reason: "\"\(key)\" \(reason)")
    }

    func seq() throws(JSONProblem) -> UInt64 { try integer("seq") }

    func date() throws(JSONProblem) -> Date {
        guard let date = Timestamp.date(try string("at")) else { throw problem("at", "is not a timestamp") }
        return date
    }

    func string(_ key: String) throws(JSONProblem) -> String {
        guard case let .string(text)? = root[key]?.value else { throw problem(key, "must be a string") }
        return text
    }

    func optionalString(_ key: String) throws(JSONProblem) -> String? {
        guard let node = root[key], !node.isNull else { return nil }
        return try string(key)
    }

    /// A seq, a basket, a `syncedThrough`: from 0 to ``SyncState/largestSeq``.
    func integer(_ key: String) throws(JSONProblem) -> UInt64 {
        guard let value = root[key]?.integer, value >= 0, UInt64(value) <= SyncState.largestSeq else { throw problem(key, "must be a whole number from 0 to \(SyncState.largestSeq)") }
        return UInt64(value)
    }

    func optionalInteger(_ key: String) throws(JSONProblem) -> UInt64? {
        guard let node = root[key], !node.isNull else { return nil }
        return try integer(key)
    }

    func enumeration<T: RawRepresentable>(_ key: String, _ type: T.Type) throws(JSONProblem) -> T where T.RawValue == String {
        guard let value = T(rawValue: try string(key)) else { throw problem(key, "is unknown") }
        return value
    }

    func products(_ key: String) throws(JSONProblem) -> [RetailerProduct] {
        guard case let .array(items)? = root[key]?.value else { throw problem(key, "must be a list of lines") }
        var products: [RetailerProduct] = []
        for item in items {
            guard case let .string(id)? = item["id"]?.value, let quantity = item["quantity"]?.integer else {
                throw JSONProblem(offset: item.offset, reason: "a line must be {\"id\": string, \"quantity\": whole number}")
            }
            products.append(RetailerProduct(id: id, quantity: quantity))
        }
        return products
    }
}
