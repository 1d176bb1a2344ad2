import BasketSync

/// The JSON Lines form of each record — outbox, notification, payment: one object per line,
/// `seq` first, compact, deterministic — and its reader, for `apply` and the projections' catch-up.
package enum RecordFormat {
    /// A list of lines with the default key names.
    package static func products(_ products: [RetailerProduct], into writer: inout JSONWriter) {
        writer.raw("[")
        for (index, product) in products.enumerated() {
            if index > 0 { writer.raw(",") }
            writer.raw("{\"id\":")
            writer.string(product.id)
            writer.raw(",\"quantity\":")
            writer.integer(product.quantity)
            writer.raw("}")
        }
        writer.raw("]")
    }

    /// The outbox line of `record`, ending in a newline.
    package static func line(_ record: OutboxRecord) -> [UInt8] {
        var writer = JSONWriter()
        writer.raw("{\"seq\":")
        writer.integer(record.seq)
        writer.raw(",\"id\":")
        writer.string(record.id)
        writer.raw(",\"type\":")
        writer.string(record.type.rawValue)
        writer.raw(",\"at\":")
        writer.string(Timestamp.text(record.at))
        if let source = record.source {
            writer.raw(",\"source\":")
            writer.string(source)
        }
        if let transferId = record.transferId {
            writer.raw(",\"transferId\":")
            writer.string(transferId)
        }
        if record.type == .updateBasket {
            writer.raw(",\"products\":")
            products(record.products, into: &writer)
        }
        writer.raw("}\n")
        return writer.bytes
    }

    /// The notifications line of `notification`, ending in a newline.
    package static func line(_ notification: BasketNotification) -> [UInt8] {
        var writer = JSONWriter()
        writer.raw("{\"seq\":")
        writer.integer(notification.seq)
        writer.raw(",\"type\":\"notifyRetailerBasketChanged\",\"at\":")
        writer.string(Timestamp.text(notification.at))
        writer.raw(",\"products\":")
        products(notification.products, into: &writer)
        writer.raw(",\"syncedThrough\":")
        if let synced = notification.syncedThrough { writer.integer(synced) } else { writer.raw("null") }
        writer.raw("}\n")
        return writer.bytes
    }

    /// The payments line of `payment`, ending in a newline.
    package static func line(_ payment: PaymentRecord) -> [UInt8] {
        var writer = JSONWriter()
        writer.raw("{\"seq\":")
        writer.integer(payment.seq)
        writer.raw(",\"type\":")
        writer.string(payment.type.rawValue)
        writer.raw(",\"at\":")
        writer.string(Timestamp.text(payment.at))
        writer.raw(",\"status\":")
        writer.string(payment.status.rawValue)
        if let reason = payment.reason {
            writer.raw(",\"reason\":")
            writer.string(reason.rawValue)
        }
        writer.raw(",\"storeId\":")
        writer.optionalString(payment.storeId)
        writer.raw(",\"orderId\":")
        writer.optionalString(payment.orderId)
        writer.raw(",\"totalPrice\":")
        writer.string(payment.totalPrice.text)
        writer.raw(",\"products\":")
        products(payment.products, into: &writer)
        writer.raw(",\"mealzProducts\":")
        products(payment.mealzProducts, into: &writer)
        writer.raw(",\"basket\":")
        writer.integer(payment.basket)
        writer.raw("}\n")
        return writer.bytes
    }

    // MARK: Reading back

    /// The seq of a line this format wrote: it starts with `{"seq":N,`; 0 for any other line.
    package static func seq(ofLine line: some Collection<UInt8>) -> UInt64 {
        let prefix = "{\"seq\":".utf8
        guard line.starts(with: prefix) else { return 0 }
        var value: UInt64 = 0
        for byte in line.dropFirst(prefix.count) {
            guard (0x30...0x39).contains(byte) else { break }
            let (times, overflow) = value.multipliedReportingOverflow(by: 10)
            guard !overflow else { return 0 }
            value = times &+ UInt64(byte - 0x30)
        }
        return value
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
            syncedThrough: try reader.optionalInteger("syncedThrough"))
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

    func integer(_ key: String) throws(JSONProblem) -> UInt64 {
        guard let value = root[key]?.integer, value >= 0 else { throw problem(key, "must be a whole number") }
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
