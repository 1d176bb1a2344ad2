/// A problem with the products handed to the library; nothing was changed.
public enum SyncInputError: Error, Hashable, Sendable, CustomStringConvertible {
    /// A line has an empty id.
    case emptyProductId
    /// A line that must be absolute has a negative quantity.
    case negativeQuantity(id: String, quantity: Int)
    /// The lines of one id add up past what a quantity holds (`Int`'s range).
    case quantitiesOverflow(id: String)

    /// A sentence saying what is wrong and what to do.
    public var description: String {
        switch self {
        case .emptyProductId:
            return "a product has an empty id; give every line a non-empty \"id\""
        case let .negativeQuantity(id, quantity):
            return "product \"\(id)\" has quantity \(quantity); absolute quantities must be 0 or more"
        case let .quantitiesOverflow(id):
            return "the lines of product \"\(id)\" add up past what a quantity can hold; give the id once, with its real quantity"
        }
    }
}

/// Why `handlePayment` failed; no record was made and the completion was not run.
public enum PaymentError: Error, Hashable, Sendable, CustomStringConvertible {
    /// The mode is not retailer mode.
    case notRetailerMode
    /// No store is set.
    case noStore
    /// The order id is empty.
    case emptyOrderId
    /// The product list is not valid.
    case invalidProducts(SyncInputError)
    /// A retry of an order recorded as payment `seq` differs from it (``PaymentRecord/retryDifference(totalPrice:productList:)``).
    case differentRetry(orderId: String, seq: UInt64, difference: String)

    /// A sentence saying what is wrong and what to do.
    public var description: String {
        switch self {
        case .notRetailerMode:
            return "payments are recorded only in retailer mode; set it with set-store STORE_ID --mode retailer"
        case .noStore:
            return "no store is set; set one with set-store STORE_ID (setSelectedStoreWithExternalId)"
        case .emptyOrderId:
            return "the order id is empty; give the host's order id"
        case let .invalidProducts(error):
            return "the product list is not valid: \(error)"
        case let .differentRetry(orderId, seq, difference):
            return "order \(orderId.debugDescription) was recorded as payment #\(seq), and this retry differs: \(difference); nothing was recorded and no completion was run. A new order needs its own order id"
        }
    }
}
