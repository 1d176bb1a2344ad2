import BasketSync
import Glibc

/// The JSON Lines form of each record: one object per line, `seq` first, compact, deterministic.
enum RecordFormat {
    /// `2026-11-30T09:30:00.123Z`.
    static func timestamp(_ date: Date) -> String {
        let milliseconds = Int64((date.timeIntervalSince1970 * 1000).rounded(.down))
        var seconds = time_t(milliseconds / 1000)
        var parts = tm()
        gmtime_r(&seconds, &parts)
        func pad(_ value: Int32, _ width: Int) -> String {
            let text = String(value)
            return String(repeating: "0", count: max(0, width - text.count)) + text
        }
        return "\(pad(parts.tm_year + 1900, 4))-\(pad(parts.tm_mon + 1, 2))-\(pad(parts.tm_mday, 2))T"
            + "\(pad(parts.tm_hour, 2)):\(pad(parts.tm_min, 2)):\(pad(parts.tm_sec, 2)).\(pad(Int32(milliseconds % 1000), 3))Z"
    }

    static func products(_ products: [RetailerProduct], into writer: inout JSONWriter) {
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

    static func line(_ record: OutboxRecord) -> [UInt8] {
        var writer = JSONWriter()
        writer.raw("{\"seq\":")
        writer.integer(record.seq)
        writer.raw(",\"id\":")
        writer.string(record.id)
        writer.raw(",\"type\":")
        writer.string(record.type.rawValue)
        writer.raw(",\"at\":")
        writer.string(timestamp(record.at))
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

    static func line(_ notification: BasketNotification) -> [UInt8] {
        var writer = JSONWriter()
        writer.raw("{\"seq\":")
        writer.integer(notification.seq)
        writer.raw(",\"type\":\"notifyRetailerBasketChanged\",\"at\":")
        writer.string(timestamp(notification.at))
        writer.raw(",\"products\":")
        products(notification.products, into: &writer)
        writer.raw(",\"syncedThrough\":")
        if let synced = notification.syncedThrough { writer.integer(synced) } else { writer.raw("null") }
        writer.raw("}\n")
        return writer.bytes
    }

    static func line(_ payment: PaymentRecord) -> [UInt8] {
        var writer = JSONWriter()
        writer.raw("{\"seq\":")
        writer.integer(payment.seq)
        writer.raw(",\"type\":")
        writer.string(payment.type.rawValue)
        writer.raw(",\"at\":")
        writer.string(timestamp(payment.at))
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
}
